"""pyverbs.providers: vendors' direct verbs. nsnic is none of these vendors' devices."""
