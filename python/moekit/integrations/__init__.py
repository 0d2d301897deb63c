"""Integrations of moekit with other libraries (imported on demand, e.g.
`moekit.integrations.transformers`)."""
