"""What a person at a terminal meets, shared by the ``xengine`` subcommands, the
``pipelines/*.py`` scripts and the service's configuration checks: option types that reject a
bad value with one line naming the option (``argtypes``) and progress display (``progress``)."""
