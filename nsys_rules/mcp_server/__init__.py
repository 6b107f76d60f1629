"""``nsys-rules mcp``: the judged findings, savings and diff verdicts over the Model Context Protocol.

:mod:`.server` wires the tools and resources onto the ``mcp`` SDK (an optional extra:
``pip install 'nsys-rules[mcp]'``); :mod:`.schemas` declares what each tool takes and returns;
:mod:`.worker` runs the calls in a worker process within the time limit; :mod:`.work`,
:mod:`.verify` and :mod:`.capture_tool` are the tools' work, through the CLI's own code paths;
:mod:`.paths` checks every path an agent gives. ``docs/agents.md`` is the page for agents.
"""
