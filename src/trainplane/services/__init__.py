"""What the API routes and the scheduler loops do, over ``trainplane.db``.

Services own their transactions: each public function opens and commits its own
unit of work on the Session it is given, and raises ``trainplane.errors`` types
that the API maps to HTTP. Every query is scoped by the caller's projects.
"""
