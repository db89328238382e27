// Changing the case selector reloads the page for that case (the form works without it too).
document.addEventListener("DOMContentLoaded", () => {
  const select = document.getElementById("case");
  if (select) select.addEventListener("change", () => select.form.submit());
});
