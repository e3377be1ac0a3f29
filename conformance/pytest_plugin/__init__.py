"""The pytest face: the plugin (entry point `pytest11: dflash_conformance`), the suites generated from the check table, expectations and goldens under pytest."""
