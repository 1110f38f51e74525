"""Experiments over many runs: sweep files (plan), running them (runner), reading their results
back (results) and the paper's tables and figures built from them (paper, tables, plots)."""
