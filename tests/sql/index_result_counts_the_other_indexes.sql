-- index result counts the other indexes
-- What the result of a mapped task's index returns, under the run's lock: whether another
-- index of the task is unfinished (by (dag_run_id, state)), and whether TIs wait in its
-- pool for the slot it frees.
EXISTS (SELECT * 
FROM task_instance AS sibling, task_instance 
WHERE sibling.dag_run_id = %(run_pk)s::BIGINT AND sibling.state IN (%(param_1)s::VARCHAR, %(param_2)s::VARCHAR, %(param_3)s::VARCHAR, %(param_4)s::VARCHAR, %(param_5)s::VARCHAR) AND sibling.task_id = %(counted_task)s::VARCHAR AND sibling.id != task_instance.id),
EXISTS (SELECT * 
FROM task_instance AS waiter 
WHERE waiter.state = 'scheduled' AND waiter.pool = %(lock_pool)s::VARCHAR)
