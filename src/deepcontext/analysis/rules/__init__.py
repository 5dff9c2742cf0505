"""Built-in rule families, one module each; the registry lists them in documentation order."""
