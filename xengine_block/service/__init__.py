"""The operator's surface: ``xengine correlate`` (a live X-engine instance), its Prometheus
metrics, and ``xengine combine`` (join instances' files along frequency).

Modules: :mod:`.config` (keys, flags, validation), :mod:`.sources` (UDP/multicast sockets),
:mod:`.correlate` (the service), :mod:`.metrics` (Prometheus), :mod:`.combine` (pyuvdata).
The subcommands are ``cli/correlate.py`` and ``cli/combine.py``; ``docs/deploy.md`` is the
operator's guide.
"""

