"""One module per kind of experiment, each a parameters dataclass and a measure function (contract.py), listed in
registry.py, which finds stored runs and makes the missing ones."""
