"""The HTML report: `command` (the CLI), `charts` (figures per case family), `tables` (table rows)."""
