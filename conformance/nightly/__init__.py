"""Nightly across many hosts: shards of the matrix, merged reports, history across commits, packages."""
