-- active runs of a DAG
-- Queued and running runs of one DAG (backfills aside): a scheduled run is created only
-- while they are fewer than max_active_runs, as Airflow does.
SELECT count(*) AS count_1 
FROM dag_run 
WHERE dag_run.dag_id = %(dag_id)s::VARCHAR AND dag_run.state IN (__[POSTCOMPILE_state_1]) AND dag_run.run_type != %(run_type_1)s::VARCHAR
