"""The relay's dashboard: server-rendered HTML pages, each with a JSON twin.

- ``/dashboard`` (``/dashboard.json``): backends x recent upstream PRs and trunk
  commits, one coloured cell per (row, backend) linking to the job;
- ``/dashboard/pr/{number}``: the PR's deliveries, dispatches, jobs and check runs;
- ``/dashboard/jobs/{id}``: one job with its counts, failed tests, check run and the
  per-test results it uploaded;
- ``/dashboard/backends/{owner}/{repo}``: a backend's recent jobs; its plan by mode
  and reason, as its newest results upload applied it; the plan's recent changes (the
  plan versions its newest uploads ran with, and what changed between them) and the
  refinement proposals ``crcr select refine`` makes from those uploads (the selector's,
  installed by ``crcr serve`` as ``Runtime.refine_proposals``);
- ``/dashboard/triage``: the triage verdicts stored on jobs, one row per (backend,
  verdict), with the jobs carrying it, its rerun requests and the report posted.

``queries`` reads the store (paged, indexed columns only); ``pages`` renders. Every
value shown comes from webhooks or callbacks, so all of it is escaped.
"""
