"""pyverbs.providers.efa: AWS EFA direct verbs (nsnic is not an EFA device)."""
