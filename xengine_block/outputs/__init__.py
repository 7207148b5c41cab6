"""What a run leaves behind: UVH5 visibility files (``uvh5``, DESIGN.md section 7) and the
quick-look PNG (``quicklook``)."""
