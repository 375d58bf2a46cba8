-- run conf
SELECT dag_run.conf 
FROM dag_run 
WHERE dag_run.id = %(run_pk)s::BIGINT
