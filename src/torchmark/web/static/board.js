// The ranking page without a reload: changing the case selector submits its form, and a
// column heading sorts the table in place. Both work without this file too (the form's
// button, and each heading's link to `?sort=`, which the server sorts the same way).
"use strict";

function sortRows(table, th) {
  const key = th.dataset.sort;
  const column = Array.prototype.indexOf.call(th.parentNode.children, th);
  // the sorted column's link says where a click goes next: "-key" means descending
  const link = new URL(th.querySelector("a").href);
  const desc = link.searchParams.get("sort") === "-" + key;
  const value = (row) => {
    const text = row.cells[column].dataset.v;
    return text === "" ? null : Number(text);
  };
  const rows = Array.from(table.tBodies[0].rows);
  rows.sort((a, b) => {
    const x = value(a);
    const y = value(b);
    if (x === null || y === null || x === y) {
      if (x === null && y !== null) return 1; // no value: last, either way
      if (y === null && x !== null) return -1;
      return Number(a.cells[0].dataset.v) - Number(b.cells[0].dataset.v); // ranked order
    }
    return desc ? y - x : x - y;
  });
  for (const row of rows) table.tBodies[0].appendChild(row);
  for (const other of th.parentNode.querySelectorAll("th[data-sort]")) {
    other.removeAttribute("aria-sort");
    const a = other.querySelector("a");
    const url = new URL(a.href);
    url.searchParams.set("sort", other.dataset.sort);
    a.href = url.toString();
  }
  th.setAttribute("aria-sort", desc ? "descending" : "ascending");
  history.replaceState(null, "", link.toString()); // a reload keeps the order
  const next = new URL(link);
  next.searchParams.set("sort", desc ? key : "-" + key);
  th.querySelector("a").href = next.toString();
}

document.addEventListener("DOMContentLoaded", () => {
  const select = document.getElementById("case");
  if (select) select.addEventListener("change", () => select.form.submit());
  const table = document.getElementById("board");
  if (!table) return;
  for (const th of table.querySelectorAll("th[data-sort]")) {
    th.querySelector("a").addEventListener("click", (event) => {
      event.preventDefault();
      sortRows(table, th);
    });
  }
});
