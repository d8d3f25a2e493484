"""Document filters: one module per filter, the chain iterates their registry."""
