-- the moved TI's run
task_instance.dag_run_id
