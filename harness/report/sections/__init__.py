"""The sections of the HTML report, one module each. Every module's `build(...)` reads a loaded run
(harness.report.load.ReportRun) or several and returns plain dicts and lists for its template,
templates/sections/<name>.html.j2; `None` where a run has nothing for the section."""
