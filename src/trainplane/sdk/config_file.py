"""The client's config file, written by ``trainplane login``: the server's URL
and a token for it, read by the CLI and the SDK when neither a flag/argument
nor ``TRAINPLANE_URL``/``TRAINPLANE_TOKEN`` says otherwise (flags > environment
> this file > the defaults).

Where: ``$TRAINPLANE_CONFIG`` if set, else
``$XDG_CONFIG_HOME/trainplane/config.yaml`` (``~/.config/trainplane/config.yaml``).
It holds a secret, so it is written with mode 0600 in a 0700 folder. Its token
is sent only to the URL it was saved with: pointing the client elsewhere (by
flag or environment) never leaks it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from trainplane.sdk.credentials import token_for

CONFIG_VARIABLE = "TRAINPLANE_CONFIG"


def config_path() -> Path:
    given = os.environ.get(CONFIG_VARIABLE)
    if given:
        return Path(given)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "trainplane" / "config.yaml"


@dataclass(frozen=True)
class ClientConfig:
    url: str | None = None
    token: str | None = None

    def token_for(self, url: str) -> str | None:
        """The saved token, only for the URL it was saved with."""
        if self.url is None or self.token is None:
            return None
        return self.token if url.rstrip("/") == self.url.rstrip("/") else None


class ConfigFileError(Exception):
    pass


def read_config(path: Path | None = None) -> ClientConfig:
    """The saved settings; empty when there is no file. A file that is not a
    mapping of strings raises ConfigFileError naming it."""
    path = path or config_path()
    try:
        document = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        return ClientConfig()
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigFileError(f"cannot read the config file {path}: {exc}") from None
    if document is None:
        return ClientConfig()
    if not isinstance(document, dict) or not all(
        isinstance(document.get(key), str | None) for key in ("url", "token")
    ):
        raise ConfigFileError(f"{path}: expected `url:` and `token:` strings")
    return ClientConfig(document.get("url"), document.get("token"))


def write_config(config: ClientConfig, path: Path | None = None) -> Path:
    """Save ``config`` readable by its owner only; returns where."""
    path = path or config_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    body = {"url": config.url, **({"token": config.token} if config.token else {})}
    text = "# written by `trainplane login`; read by the trainplane CLI and SDK\n"
    text += yaml.safe_dump(body, sort_keys=False)
    # Created 0600 before anything is written: the secret is never world-readable.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text)
    os.chmod(path, 0o600)  # an older file may have had a wider mode
    return path


def resolve_connection(
    url: str | None, token: str | None, default_url: str
) -> tuple[str, str | None, str]:
    """The base URL, the token and where the URL came from, by precedence:
    the given values (flags, arguments), then ``TRAINPLANE_URL`` and
    ``TRAINPLANE_TOKEN``, then the config file, then ``default_url`` (and,
    for a server on this machine, the local token; ``credentials``)."""
    config = read_config()
    if url:
        base, source = url, "--url"
    elif os.environ.get("TRAINPLANE_URL"):
        base, source = os.environ["TRAINPLANE_URL"], "TRAINPLANE_URL"
    elif config.url:
        base, source = config.url, str(config_path())
    else:
        base, source = default_url, "the default"
    base = base.rstrip("/")
    chosen = token or os.environ.get("TRAINPLANE_TOKEN") or config.token_for(base)
    return base, token_for(base, chosen), source


def url_problem(url: str, source: str) -> str | None:
    """Why ``url`` cannot be a server's address, in words; None when it can."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme in ("http", "https") and rest:
        return None
    hint = f" (write http://{url} or https://{url})" if not sep else ""
    return f"the server address {url!r} from {source} is not an http:// or https:// URL{hint}"
