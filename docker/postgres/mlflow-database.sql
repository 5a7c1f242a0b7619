-- MLflow's backend store, beside trainplane's own database on the compose
-- PostgreSQL. The image's entrypoint runs this as the trainplane role (the
-- owner, then) on first start only, with an empty data volume; MLflow creates
-- its tables itself when its server starts.
CREATE DATABASE mlflow;
