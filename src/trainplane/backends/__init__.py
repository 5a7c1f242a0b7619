"""Where attempts run. ``ray`` talks to a registered Ray cluster through the Ray
Jobs API; ``local_ray`` starts and stops the embedded single-machine cluster.

Backend calls are slow network calls: the scheduler makes them outside database
transactions and applies their results afterwards.
"""
