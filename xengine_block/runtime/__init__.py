"""The pipeline runtime: rings with Bifrost's ring2 semantics, blocks and their threads, and
per-block counters (docs/design.md, "Rings and blocks"). ``xengine_block.bifrost`` runs the
same blocks on real Bifrost."""
