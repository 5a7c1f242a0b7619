"""Jobs as pure data: the spec models, durations and the status transition table.

No I/O here: the API, the scheduler and the CLI all build on these definitions.
"""
