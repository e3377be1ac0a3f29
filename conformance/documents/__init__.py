"""Documents: cases, device profiles, observations, golden documents and their schemas, and the readers of the files a user hands the framework."""
