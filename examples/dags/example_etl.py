"""An example DAG: extract, two transforms in parallel, a branch, a load, and a callback
at the run's end (it runs on a worker; `Webhook()` would post it to $SLUICE_WEBHOOK_URL)."""

from datetime import UTC, datetime, timedelta

from sluice import DAG, ShellTask, TriggerRule, task


def finished(context):
    print(f"callback: {context['dag_id']} {context['run_id']} ended {context['state']}")


with DAG(
    "example_etl",
    schedule="@daily",
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=4,
    on_success_callback=finished,
    on_failure_callback=finished,
) as dag:

    @task
    def extract():
        return {"rows": [3, 1, 4, 1, 5, 9, 2, 6]}

    @task(retries=1, retry_delay=timedelta(seconds=1))
    def total(context):
        return sum(context["upstream"]["extract"]["rows"])

    @task
    def biggest(context):
        return max(context["upstream"]["extract"]["rows"])

    @task.branch
    def check(context):
        return "report" if context["upstream"]["total"] > 10 else "alert"

    @task
    def report(context):
        up = context["upstream"]
        print(f"run {context['run_id']}: the branch chose {up['check']!r}")
        return "ok"

    @task
    def alert():
        return "small batch"

    done = ShellTask(
        "done",
        command='echo "finished $SLUICE_DAG_ID $SLUICE_RUN_ID"',
        trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS,
    )

    extract >> [total, biggest]
    total >> check >> [report, alert]
    [report, alert, biggest] >> done
