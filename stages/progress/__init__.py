"""What a run shows while it runs.

- `run`: the progress of the problem stages, as doit's reporter (`RunProgress`): one line per stage, the
  live view, failures as they happen and the recap at the end;
- `failures`: the one-line reasons of failed tasks and steps, grouped by reason;
- `live_view`: the live status line (a tqdm bar on a terminal, plain `progress: ...` lines elsewhere);
- `live_line`: fitting a status line into a terminal's width;
- `phase`: the progress of a phase that runs outside the problem stages (target derivation);
- `activity`: what the run is doing right now, the gauges and tallies the stages publish and the live view reads.
"""
