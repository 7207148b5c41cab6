"""Telling the sky from broken inputs and RFI (``docs/flagging.md``).

- :mod:`~xengine_block.health.inputs`: per-input statistics of a dump (power, bandpass
  deviation, the fraction of samples at the quantiser's extremes, correlation with the other
  inputs), judged into states (``dead``, ``stuck``, ``saturated``, ``low_power``,
  ``high_power``, ``decorrelated``) against :class:`~xengine_block.health.inputs.Thresholds`;
  the quantiser-extreme counts these use come from the native layout pass, or from
  :meth:`~xengine_block.sample_layout.SampleLayout.count_extremes` (numpy: the reference the
  native pass is checked against, and the count of backends without a pass of their own);
- :mod:`~xengine_block.health.monitor`: the states over time: one log line per change of
  state, the summary's ``bad_inputs``, the latest state per input for displays and metrics,
  and the flags of every baseline of an input judged bad;
- :mod:`~xengine_block.health.rfi`: RFI flags from AOFlagger, over a file's whole time span
  or a sliding window of dumps.
"""
