"""Developer scripts: exporting fixtures and networks with pnnx (needs the export extra)."""
