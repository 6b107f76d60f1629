"""The domain's shared analyses: pure functions over a trace's canonical frames.

- :mod:`.names` - API calls and NVTX ranges by what they are (data).
- :mod:`.intervals` - unions, busy time, gaps, overlaps.
- :mod:`.launches` - the launch join (GPU row -> launching API call).
- :mod:`.activity` - every GPU operation (kernels, copies, memsets, graph replays) as one table.
- :mod:`.steps` - the step model: what one step of the workload's loop is.
- :mod:`.budget` - where the time of a step goes, in parts that add up.

Rules call these and phrase findings; they never re-derive steps or GPU activity themselves.
"""
