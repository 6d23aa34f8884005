"""The proactive agent (issue 12): routines, heartbeat, notifications, stuck turns.

* :mod:`.targets`   ``telegram:123`` / ``slack:T1/C9`` ... -> ThreadKey
* :mod:`.notify`    send to a target with no inbound event (deduplicated)
* :mod:`.routines`  the Routine model, validation, the Redis store
* :mod:`.runner`    one fire of a routine (light LLM call or full agent job); event triggers
* :mod:`.heartbeat` the periodic checklist
* :mod:`.scheduler` the one leader (Redis lease) that fires cron routines, queued runs
  and the heartbeat
* :mod:`.recovery`  turn timeout and interrupted-turn reset (wraps every turn)
* :mod:`.commands`  ``/routine`` and ``/heartbeat``
* :mod:`.service`   :class:`Proactive`, built once per worker process by the runtime
"""
