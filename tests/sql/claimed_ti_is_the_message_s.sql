-- claimed TI is the message's
-- The code a try runs is the claimed row's: a message whose ids disagree with its TI's
-- claims nothing (stale), whatever its ti_id and attempt_id. Each id is compared through
-- `|| ''`: on `dag_id` itself a plan made while the table was small reads the DAG's every
-- TI by ix_task_instance_dag_state to claim one.
(task_instance.dag_id || '') = %(m_dag)s::VARCHAR AND (task_instance.run_id || '') = %(m_run)s::VARCHAR AND (task_instance.task_id || '') = %(m_task)s::VARCHAR
