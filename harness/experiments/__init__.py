"""A folder per kind of experiment, each declaring its KIND (contract.py), listed in registry.py, which finds
stored runs and makes the missing ones."""
