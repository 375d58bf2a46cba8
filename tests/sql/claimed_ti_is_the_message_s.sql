-- claimed TI is the message's
-- The code a try runs is the claimed row's: a message whose ids disagree with its TI's
-- claims nothing (stale), whatever its ti_id and attempt_id.
task_instance.dag_id = %(m_dag)s::VARCHAR AND task_instance.run_id = %(m_run)s::VARCHAR AND task_instance.task_id = %(m_task)s::VARCHAR
