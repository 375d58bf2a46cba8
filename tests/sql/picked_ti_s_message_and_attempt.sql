-- picked TI's message and attempt
task_instance.id,
task_instance.dag_id,
task_instance.run_id,
task_instance.task_id,
task_instance.try_number - %(try_number_1)s::INTEGER,
task_instance.queue,
task_instance.context_carrier,
task_instance.attempt_id
