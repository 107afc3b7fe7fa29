"""Runs the labs and writes the report: report.json, report.md, index.html, figures/."""

from .build import build_report, run_labs

__all__ = ["build_report", "run_labs"]
