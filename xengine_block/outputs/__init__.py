"""What a run leaves behind: UVH5 visibility files (``uvh5``, docs/design.md, "UVH5
conventions") and the quick-look PNG (``quicklook``)."""
