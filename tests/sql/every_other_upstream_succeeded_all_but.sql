-- every other upstream succeeded: all_but
-- The all_success rule in SQL (a twin of tasks.trigger_rules.decide, checked by a parity
-- test): no other upstream anything but a success.
NOT (EXISTS (SELECT * 
FROM task_instance AS up 
WHERE up.dag_run_id = %(run_pk)s::BIGINT AND (up.task_id NOT IN (__[POSTCOMPILE_fan_in])) AND up.state != %(state_1)s::VARCHAR))
