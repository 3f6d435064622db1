"""Traffic generators: flow-size distributions (CDFs), communication patterns, Poisson flow
arrivals. Pure functions of their inputs and a seeded generator: the scenario runner turns
what they produce into work requests."""
