"""The variables GitHub Actions and GitLab CI set for a pipeline step, as the
CLI's idempotency keys read them."""

GITHUB = {
    "GITHUB_ACTIONS": "true",
    "GITHUB_REPOSITORY": "acme/models",
    "GITHUB_RUN_ID": "9001",
    "GITHUB_JOB": "finetune",
    "GITHUB_RUN_ATTEMPT": "1",
}
GITLAB = {
    "GITLAB_CI": "true",
    "CI_PROJECT_ID": "42",
    "CI_PIPELINE_ID": "777",
    "CI_JOB_NAME": "train 1/2",
    "CI_JOB_ID": "5001",
}
