"""Pure statistics of raw samples, no torch (numpy; scipy on first use): a Measurement's
median, spread and CI (measurement), FASTER / SLOWER / SAME / UNCLEAR between two of them
(comparison), and the straggler among ranks (stragglers). ``results`` imports it downward."""
