"""``mpilaunch job``: a ModelArts-like entrypoint; every host of a job runs the same command.

The platform describes the job in variables, read with the same rules as a plain launch
(``mpilaunch.config.launchconfig``):

===================  ==========================================================
``VC_WORKER_HOSTS``  comma list of the job's hosts (index 0 = worker-0)
``VC_TASK_INDEX``    this host's index in that list
``MA_NUM_GPUS``      slots per host (``--local_worker_num`` wins; default 1)
``SSHD_PORT``        sshd port on every host (``--ssh-port`` wins)
===================  ==========================================================

Modules: ``spec`` (the job from those variables), ``peer`` (worker-0 -> other host messages
over ssh), ``waiter`` (the other hosts' wait), ``worker0`` (worker-0's run), ``command``
(``main``, argv splitting). Without platform variables, ``job`` is a plain launch; bad or
missing variables are a ``UsageError`` naming the variable.
"""
