"""HTML parity reports: `model` (what a report holds), `render` (one self-contained page),
`charts` (inline SVG), `junit` (JUnit XML for CI), `from_pytest` (the pytest plugin's report)."""
