"""Request and response bodies of the API, one module per resource. Response
bodies are built from service views or ORM rows by their ``from_*`` methods."""
