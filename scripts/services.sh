#!/usr/bin/env bash
# fleetmon local services: the real Kafka, Redis, Prometheus and Alertmanager
# that the integration tests, the benchmarks and `make run` talk to.
#
#   bash scripts/services.sh start   [name...]   # install what is missing, start, wait until ready
#   bash scripts/services.sh stop    [name...]   # TERM, then KILL after a timeout; fine when nothing runs
#   bash scripts/services.sh status  [name...]   # one line per component
#   bash scripts/services.sh restart [name...]
#   bash scripts/services.sh reload  [name...]   # prometheus/alertmanager: re-read config and rule files
#
# names: kafka redis prometheus alertmanager (default: all of them).
#
# Everything lives in the cache folder ${FLEETMON_SERVICES_DIR:-<repo>/.services}:
# Kafka jars (kafka-libs/), data, generated configs, pid files (run/) and logs
# (logs/). Every service listens on 127.0.0.1 only. See docs/services.md.
#
# Installs happen only when something is missing: Debian packages through
# apt-get (redis-server, prometheus, prometheus-alertmanager, maven, a JRE, and
# chromium for the HTML-report test),
# Kafka's jars through Maven from Maven Central (services/pom.xml).
set -euo pipefail

ALL_SERVICES=(kafka redis prometheus alertmanager)

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${FLEETMON_SERVICES_DIR:-$REPO_DIR/.services}"
mkdir -p "$CACHE_DIR"
CACHE_DIR="$(cd "$CACHE_DIR" && pwd)"
LOG_DIR="$CACHE_DIR/logs"
RUN_DIR="$CACHE_DIR/run"
KAFKA_LIBS="$CACHE_DIR/kafka-libs"
KAFKA_DIR="$CACHE_DIR/kafka"
REDIS_DIR="$CACHE_DIR/redis"
PROM_DIR="$CACHE_DIR/prometheus"
AM_DIR="$CACHE_DIR/alertmanager"
POM="$REPO_DIR/services/pom.xml"
RULES_DIR="$REPO_DIR/alerts/rules"

HOST=127.0.0.1
KAFKA_PORT="${FLEETMON_KAFKA_PORT:-9092}"
KAFKA_CONTROLLER_PORT="${FLEETMON_KAFKA_CONTROLLER_PORT:-9093}"
REDIS_PORT="${FLEETMON_REDIS_PORT:-6379}"
PROM_PORT="${FLEETMON_PROMETHEUS_PORT:-9090}"
AM_PORT="${FLEETMON_ALERTMANAGER_PORT:-9094}"
EXPORTER_PORT="${FLEETMON_EXPORTER_PORT:-9464}"
WEBHOOK_PORT="${FLEETMON_TEST_WEBHOOK_PORT:-9465}"
KAFKA_HEAP_OPTS="${FLEETMON_KAFKA_HEAP_OPTS:--Xmx1g -Xms256m}"
READY_TIMEOUT="${FLEETMON_READY_TIMEOUT:-90}"   # seconds, per component
STOP_TIMEOUT="${FLEETMON_STOP_TIMEOUT:-30}"     # seconds before SIGKILL

mkdir -p "$LOG_DIR" "$RUN_DIR"

# FLEETMON_SERVICES_SECURE=1: a SASL_SSL Kafka listener and a TLS Redis too
# shellcheck source=../services/secure.sh
source "$REPO_DIR/services/secure.sh"
# FLEETMON_SERVICES_REDIS_CLUSTER=1: a six-node Redis Cluster on 7000-7005 too
# shellcheck source=../services/cluster.sh
source "$REPO_DIR/services/cluster.sh"
# `kafka-tool`: the Kafka command-line tools, fetched on first use
# shellcheck source=../services/tools.sh
source "$REPO_DIR/services/tools.sh"

# ---------------------------------------------------------------- helpers

log() { printf '[services] %s\n' "$*" >&2; }
die() { printf '[services] ERROR: %s\n' "$*" >&2; exit 1; }

pid_file() { printf '%s/%s.pid\n' "$RUN_DIR" "$1"; }

# A string that must appear in /proc/<pid>/cmdline, so that a pid recycled by
# an unrelated process is never mistaken for (or killed as) one of ours.
cmd_marker() {
  case "$1" in
    kafka) echo "kafka.Kafka $KAFKA_DIR/config/server.properties" ;;
    redis) echo "redis-server" ;;
    prometheus) echo "--config.file=$PROM_DIR/prometheus.yml" ;;
    alertmanager) echo "--config.file=$AM_DIR/alertmanager.yml" ;;
  esac
}

port_of() {
  case "$1" in
    kafka) echo "$KAFKA_PORT" ;;
    redis) echo "$REDIS_PORT" ;;
    prometheus) echo "$PROM_PORT" ;;
    alertmanager) echo "$AM_PORT" ;;
  esac
}

address_of() {
  case "$1" in
    kafka) echo "$HOST:$KAFKA_PORT (controller $HOST:$KAFKA_CONTROLLER_PORT)" ;;
    redis) echo "redis://$HOST:$REDIS_PORT" ;;
    prometheus) echo "http://$HOST:$PROM_PORT" ;;
    alertmanager) echo "http://$HOST:$AM_PORT" ;;
  esac
}

log_file_of() {
  case "$1" in
    kafka) echo "$LOG_DIR/kafka.log" ;;
    *) echo "$LOG_DIR/$1.log" ;;
  esac
}

# Prints the pid when the pid file names a live process of this component.
running_pid() {
  local name="$1" pf pid cmdline
  pf="$(pid_file "$name")"
  [[ -s "$pf" ]] || return 1
  pid="$(tr -dc '0-9' <"$pf")"
  [[ -n "$pid" ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
  [[ "$cmdline" == *"$(cmd_marker "$name")"* ]] || return 1
  echo "$pid"
}

port_open() {
  timeout 2 bash -c "exec 3<>/dev/tcp/$HOST/$1" 2>/dev/null
}

# "java(pid=123)" for whatever listens on a TCP port, if ss can tell.
port_owner() {
  command -v ss >/dev/null 2>&1 || return 0
  ss -ltnpH "sport = :$1" 2>/dev/null | grep -o 'users:(([^)]*))' | head -1 || true
}

tail_log() {
  local f
  for f in "$@"; do
    [[ -s "$f" ]] || continue
    printf -- '----- last lines of %s -----\n' "$f" >&2
    tail -n 40 "$f" >&2
  done
}

http_ok() {  # url -> 0 when it answers 2xx
  if command -v curl >/dev/null 2>&1; then
    curl -fsS -o /dev/null --max-time 3 "$1" 2>/dev/null
  else
    python3 - "$1" <<'PY' 2>/dev/null
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=3) as r:
    sys.exit(0 if 200 <= r.status < 300 else 1)
PY
  fi
}

http_post() {  # url -> 0 when it answers 2xx
  if command -v curl >/dev/null 2>&1; then
    curl -fsS -o /dev/null --max-time 10 -X POST "$1"
  else
    python3 - "$1" <<'PY'
import sys, urllib.request
req = urllib.request.Request(sys.argv[1], data=b"", method="POST")
with urllib.request.urlopen(req, timeout=10) as r:
    sys.exit(0 if 200 <= r.status < 300 else 1)
PY
  fi
}

# ---------------------------------------------------------------- installs

APT_UPDATED=0
apt_install() {  # pkg... ; only called when something is missing
  command -v apt-get >/dev/null 2>&1 || die "need Debian packages ($*) but apt-get is not available"
  [[ "$(id -u)" == 0 ]] || die "need Debian packages ($*): run as root or install them first"
  local added_policy=0 rc=0
  # Debian postinst scripts would otherwise start the packaged services on the
  # default ports (6379, 9090, 9093!) behind our back.
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    added_policy=1
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  if [[ "$APT_UPDATED" == 0 ]]; then
    log "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -q >>"$LOG_DIR/install.log" 2>&1 || rc=$?
    APT_UPDATED=1
  fi
  if [[ "$rc" == 0 ]]; then
    log "apt-get install $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" \
      >>"$LOG_DIR/install.log" 2>&1 || rc=$?
  fi
  if [[ "$added_policy" == 1 ]]; then
    rm -f /usr/sbin/policy-rc.d
    trap - EXIT
  fi
  if [[ "$rc" != 0 ]]; then
    tail_log "$LOG_DIR/install.log"
    die "apt-get failed installing: $* (full log: $LOG_DIR/install.log)"
  fi
}

need_cmd() {  # command package
  command -v "$1" >/dev/null 2>&1 || apt_install "$2"
  command -v "$1" >/dev/null 2>&1 || die "'$1' still missing after installing Debian package $2"
}

ensure_tools() {
  need_cmd curl curl
  need_cmd flock util-linux
  need_cmd setsid util-linux
}

# Not a service: the headless browser the HTML-report test draws the page in
# (tests/integration/test_render_browser.py); installed by `start`, with the rest.
ensure_test_tools() {
  need_cmd chromium chromium
}

# Debian packages a component needs (cheap to check, needed before probing a
# port); Kafka's jars come later, only when this script really starts Kafka.
ensure_packages() {
  case "$1" in
    kafka)
      need_cmd java default-jre-headless
      need_cmd mvn maven
      ;;
    redis)
      need_cmd redis-server redis-server
      need_cmd redis-cli redis-tools
      ;;
    prometheus)
      need_cmd prometheus prometheus
      ;;
    alertmanager)
      need_cmd prometheus-alertmanager prometheus-alertmanager
      ;;
  esac
}

# The jars are re-fetched only when missing or when services/pom.xml changed.
ensure_kafka_libs() {
  local stamp="$KAFKA_LIBS/.fetched-from-pom" want
  want="$(sha256sum "$POM" | cut -d' ' -f1)"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]] \
     && compgen -G "$KAFKA_LIBS/kafka_2.13-*.jar" >/dev/null \
     && compgen -G "$KAFKA_LIBS/slf4j-reload4j-*.jar" >/dev/null \
     && compgen -G "$KAFKA_LIBS/reload4j-*.jar" >/dev/null; then
    return 0
  fi
  log "fetching Kafka jars from Maven Central (services/pom.xml) into $KAFKA_LIBS"
  local tmp="$KAFKA_LIBS.tmp.$$" t0=$SECONDS
  rm -rf "$tmp"
  if ! mvn -B -q -f "$POM" dependency:copy-dependencies -DoutputDirectory="$tmp" \
       >"$LOG_DIR/maven.log" 2>&1; then
    rm -rf "$tmp"
    tail_log "$LOG_DIR/maven.log"
    die "could not fetch the Kafka jars with Maven (full log: $LOG_DIR/maven.log)"
  fi
  compgen -G "$tmp/kafka_2.13-*.jar" >/dev/null || die "Maven ran but no kafka_2.13 jar in $tmp"
  echo "$want" >"$tmp/.fetched-from-pom"
  rm -rf "$KAFKA_LIBS"
  mv "$tmp" "$KAFKA_LIBS"
  local -a jars=("$KAFKA_LIBS"/*.jar)
  log "Kafka jars ready (${#jars[@]} jars, $((SECONDS - t0)) s)"
}

# ---------------------------------------------------------------- configs

write_kafka_config() {
  mkdir -p "$KAFKA_DIR/data" "$KAFKA_DIR/config"
  cat >"$KAFKA_DIR/config/server.properties" <<EOF
# generated by scripts/services.sh; edits are overwritten at the next start
node.id=1
process.roles=broker,controller
controller.quorum.voters=1@$HOST:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://$HOST:$KAFKA_PORT,CONTROLLER://$HOST:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://$HOST:$KAFKA_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$KAFKA_DIR/data
num.network.threads=3
num.io.threads=4
num.partitions=4
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
delete.topic.enable=true
# 10 MiB records, so that a 5 MB payload can be produced and then reach a DLQ
message.max.bytes=10485760
replica.fetch.max.bytes=10485760
socket.request.max.bytes=104857600
# a test box, not a data store: keep the disk bounded
log.retention.hours=24
log.segment.bytes=268435456
log.retention.check.interval.ms=300000
EOF
  cat >"$KAFKA_DIR/config/log4j.properties" <<EOF
# generated by scripts/services.sh: the broker logs to $LOG_DIR/kafka.log
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.RollingFileAppender
log4j.appender.file.File=$LOG_DIR/kafka.log
log4j.appender.file.MaxFileSize=20MB
log4j.appender.file.MaxBackupIndex=3
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.kafka.network.RequestChannel\$=WARN
log4j.logger.org.apache.kafka.clients.NetworkClient=WARN
EOF
  if secure_on; then secure_kafka_config; fi
  cat >"$KAFKA_DIR/config/tools-log4j.properties" <<'EOF'
log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.appender.stderr.Target=System.err
EOF
}

kafka_tool() {
  java -Xmx256m -Dlog4j.configuration="file:$KAFKA_DIR/config/tools-log4j.properties" \
    -cp "$KAFKA_LIBS/*" kafka.tools.StorageTool "$@"
}

# Format the log dir once; the cluster id is generated once and kept, so a
# restart reuses the same storage (topics and offsets survive `stop`/`start`).
ensure_kafka_storage() {
  local meta="$KAFKA_DIR/data/meta.properties" id_file="$KAFKA_DIR/cluster.id" cid
  if [[ -f "$meta" ]]; then
    cid="$(sed -n 's/^cluster.id=//p' "$meta")"
    [[ -n "$cid" ]] && echo "$cid" >"$id_file"
    return 0
  fi
  if [[ ! -s "$id_file" ]]; then
    kafka_tool random-uuid 2>>"$LOG_DIR/kafka-format.log" | tail -n 1 >"$id_file.tmp"
    mv "$id_file.tmp" "$id_file"
  fi
  cid="$(cat "$id_file")"
  [[ -n "$cid" ]] || die "could not generate a Kafka cluster id (see $LOG_DIR/kafka-format.log)"
  log "formatting Kafka storage in $KAFKA_DIR/data (cluster id $cid)"
  if ! kafka_tool format -t "$cid" -c "$KAFKA_DIR/config/server.properties" --ignore-formatted \
       >>"$LOG_DIR/kafka-format.log" 2>&1; then
    tail_log "$LOG_DIR/kafka-format.log"
    die "kafka storage format failed (log: $LOG_DIR/kafka-format.log)"
  fi
}

write_redis_config() {
  mkdir -p "$REDIS_DIR"
  cat >"$REDIS_DIR/redis.conf" <<EOF
# generated by scripts/services.sh
bind $HOST
port $REDIS_PORT
protected-mode yes
daemonize yes
supervised no
pidfile $(pid_file redis)
logfile $LOG_DIR/redis.log
dir $REDIS_DIR
save ""
appendonly no
databases 64
EOF
}

write_prometheus_config() {
  mkdir -p "$PROM_DIR/data"
  cat >"$PROM_DIR/prometheus.yml" <<EOF
# generated by scripts/services.sh; edits are overwritten at the next start
global:
  scrape_interval: 5s
  evaluation_interval: 5s
  scrape_timeout: 4s

rule_files:
  - "$RULES_DIR/*.yml"

alerting:
  alertmanagers:
    - static_configs:
        - targets: ["$HOST:$AM_PORT"]

scrape_configs:
  - job_name: prometheus
    static_configs:
      - targets: ["$HOST:$PROM_PORT"]
  - job_name: fleetmon
    static_configs:
      - targets: ["$HOST:$EXPORTER_PORT"]
EOF
}

write_alertmanager_config() {
  mkdir -p "$AM_DIR/data"
  cat >"$AM_DIR/alertmanager.yml" <<EOF
# generated by scripts/services.sh; edits are overwritten at the next start
global:
  # An alert posted without endsAt resolves after this (fleetmon posts endsAt
  # and re-posts firing alerts every evaluation, see docs/alerts.md "Delivery");
  # short here so tests/integration/test_alertmanager.py can outlast it.
  resolve_timeout: ${FLEETMON_AM_RESOLVE_TIMEOUT:-30s}
route:
  receiver: fleetmon-webhook
  group_by: ["alertname"]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
  routes:
    # alerts labelled fleetmon_notify="none" are stored and listed but never
    # sent anywhere (smoke tests use it so they do not reach a test webhook)
    - receiver: none
      matchers: ['fleetmon_notify="none"']
    # One severity vocabulary (engine and Prometheus rules): critical = page a
    # human now, warning = a ticket. Both receivers are the test webhook here;
    # in production point "page" at a pager and "ticket" at a ticket queue.
    - receiver: page
      matchers: ['severity="critical"']
    - receiver: ticket
      matchers: ['severity="warning"']

receivers:
  - name: fleetmon-webhook
    webhook_configs:
      - url: "http://$HOST:$WEBHOOK_PORT/alertmanager"
        send_resolved: true
  - name: page
    webhook_configs:
      - url: "http://$HOST:$WEBHOOK_PORT/alertmanager"
        send_resolved: true
  - name: ticket
    webhook_configs:
      - url: "http://$HOST:$WEBHOOK_PORT/alertmanager"
        send_resolved: true
  - name: none
EOF
}

# ---------------------------------------------------------------- launch

# Runs a command in its own session (so a Ctrl-C in a test run does not take
# the broker down with it), with its output appended to a log, and records the
# real pid of the exec'd program.
spawn() {  # name logfile cmd...
  local name="$1" logfile="$2"
  shift 2
  local pf
  pf="$(pid_file "$name")"
  rm -f "$pf"
  printf '\n===== %s start %s =====\n' "$name" "$(date -Is)" >>"$logfile"
  # fd 9 is the start/stop lock: the daemon must not inherit (and so hold) it
  # shellcheck disable=SC2016  # $$ and $@ are for the inner shell
  nohup setsid bash -c 'echo $$ >"$0"; exec "$@"' "$pf" "$@" </dev/null >>"$logfile" 2>&1 9>&- &
  local i
  for i in $(seq 1 50); do
    [[ -s "$pf" ]] && return 0
    sleep 0.1
  done
  die "$name did not start (no pid file $pf)"
}

# Sets PORT_STATE: "free" when we should launch, "external" when a compatible
# service not started from this cache folder already answers there (it is
# reused, and never stopped by this script). Dies when something else holds it.
PORT_STATE=""
check_port_free() {  # name port env-var
  local name="$1" port="$2" var="$3"
  PORT_STATE=free
  port_open "$port" || return 0
  if [[ "$name" != kafka-controller ]] && probe "$name"; then
    log "WARNING: $name already answers on $HOST:$port but was not started from $CACHE_DIR" \
        "($(port_owner "$port")); reusing it"
    PORT_STATE=external
    return 0
  fi
  die "port $port for $name is taken by another program ($(port_owner "$port")); stop it or set $var (see docs/services.md)"
}

port_var_of() {
  case "$1" in
    kafka) echo FLEETMON_KAFKA_PORT ;;
    redis) echo FLEETMON_REDIS_PORT ;;
    prometheus) echo FLEETMON_PROMETHEUS_PORT ;;
    alertmanager) echo FLEETMON_ALERTMANAGER_PORT ;;
  esac
}

# Sets LAUNCH_STATE: launched | running (ours, already up) | external.
# (A global rather than a return code: a function called as `f || ...` runs
# with errexit off, which would hide failures inside it.)
LAUNCH_STATE=""
launch() {
  local name="$1" pid
  if pid="$(running_pid "$name")"; then
    log "$name already running (pid $pid, $(address_of "$name"))"
    LAUNCH_STATE=running
    return 0
  fi
  ensure_packages "$name"
  check_port_free "$name" "$(port_of "$name")" "$(port_var_of "$name")"
  if [[ "$PORT_STATE" == external ]]; then
    LAUNCH_STATE=external
    return 0
  fi
  LAUNCH_STATE=launched
  case "$name" in
    kafka)
      check_port_free kafka-controller "$KAFKA_CONTROLLER_PORT" FLEETMON_KAFKA_CONTROLLER_PORT
      if secure_on; then check_port_free kafka-controller "$KAFKA_SECURE_PORT" FLEETMON_KAFKA_SECURE_PORT; fi
      ensure_kafka_libs
      write_kafka_config
      ensure_kafka_storage
      # shellcheck disable=SC2086  # heap opts are a word list on purpose
      spawn kafka "$LOG_DIR/kafka.out" \
        java $KAFKA_HEAP_OPTS -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
        -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
        -Dkafka.logs.dir="$LOG_DIR" \
        -Dlog4j.configuration="file:$KAFKA_DIR/config/log4j.properties" \
        -cp "$KAFKA_LIBS/*" kafka.Kafka "$KAFKA_DIR/config/server.properties"
      ;;
    redis)
      write_redis_config
      rm -f "$(pid_file redis)"
      printf '\n===== redis start %s =====\n' "$(date -Is)" >>"$LOG_DIR/redis.log"
      if ! redis-server "$REDIS_DIR/redis.conf" >>"$LOG_DIR/redis.log" 2>&1 9>&-; then
        tail_log "$LOG_DIR/redis.log"
        die "redis-server failed to start"
      fi
      # it daemonizes itself; the child writes the pid file a moment later
      local i
      for i in $(seq 1 50); do
        [[ -s "$(pid_file redis)" ]] && break
        sleep 0.1
      done
      ;;
    prometheus)
      write_prometheus_config
      spawn prometheus "$LOG_DIR/prometheus.log" \
        prometheus --config.file="$PROM_DIR/prometheus.yml" \
        --storage.tsdb.path="$PROM_DIR/data" \
        --storage.tsdb.retention.time=2d \
        --web.listen-address="$HOST:$PROM_PORT" \
        --web.enable-lifecycle
      ;;
    alertmanager)
      write_alertmanager_config
      spawn alertmanager "$LOG_DIR/alertmanager.log" \
        prometheus-alertmanager --config.file="$AM_DIR/alertmanager.yml" \
        --storage.path="$AM_DIR/data" \
        --web.listen-address="$HOST:$AM_PORT" \
        --cluster.listen-address=
      ;;
  esac
  return 0
}

# ---------------------------------------------------------------- readiness

KAFKA_PY=""
find_kafka_python() {
  local py
  for py in "$REPO_DIR/.venv/bin/python" python3; do
    if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import kafka.admin' >/dev/null 2>&1; then
      KAFKA_PY="$py"
      return 0
    fi
  done
  KAFKA_PY=none
}

kafka_answers_metadata() {
  [[ -n "$KAFKA_PY" ]] || find_kafka_python
  # a closed port is the common case while the JVM boots: answer that fast
  port_open "$KAFKA_PORT" || return 1
  [[ "$KAFKA_PY" == none ]] && return 0
  timeout 15 "$KAFKA_PY" - "$HOST:$KAFKA_PORT" <<'PY' >/dev/null 2>&1
import sys
from kafka.admin import KafkaAdminClient
config = {"request_timeout_ms": 3000, "bootstrap_timeout_ms": 5000}
config = {k: v for k, v in config.items() if k in KafkaAdminClient.DEFAULT_CONFIG}
admin = KafkaAdminClient(bootstrap_servers=sys.argv[1], client_id="fleetmon-services-ready", **config)
try:
    cluster = admin.describe_cluster()
    sys.exit(0 if cluster.get("brokers") else 1)
finally:
    admin.close()
PY
}

probe() {  # one cheap readiness check
  case "$1" in
    kafka) kafka_answers_metadata ;;
    kafka-controller) return 1 ;;
    redis) [[ "$(redis-cli -h "$HOST" -p "$REDIS_PORT" ping 2>/dev/null)" == PONG ]] ;;
    prometheus) http_ok "http://$HOST:$PROM_PORT/-/ready" ;;
    alertmanager) http_ok "http://$HOST:$AM_PORT/-/ready" ;;
  esac
}

wait_ready() {
  local name="$1" deadline=$((SECONDS + READY_TIMEOUT)) pid
  while :; do
    if ! pid="$(running_pid "$name")"; then
      tail_log "$(log_file_of "$name")" "$LOG_DIR/$name.out"
      die "$name exited during start-up (logs above; all logs in $LOG_DIR)"
    fi
    if probe "$name"; then
      # without kafka-python the port check can beat the broker's start-up
      [[ "$name" == kafka && "$KAFKA_PY" == none ]] && sleep 3
      return 0
    fi
    if ((SECONDS >= deadline)); then
      tail_log "$(log_file_of "$name")" "$LOG_DIR/$name.out"
      die "$name did not become ready within ${READY_TIMEOUT}s on $(address_of "$name") (pid $pid left running for inspection: services.sh stop ends it; logs above; all logs in $LOG_DIR)"
    fi
    sleep 0.5
  done
}

# ---------------------------------------------------------------- commands

cmd_start() {
  local name t0=$SECONDS
  local -a ours=() t_start=() states=()
  # launch everything first, then wait: Kafka's start-up overlaps the others
  for name in "$@"; do
    launch "$name"
    if [[ "$LAUNCH_STATE" != external ]]; then
      ours+=("$name")
      t_start+=("$SECONDS")
      states+=("$LAUNCH_STATE")
    fi
  done
  # also for the ones already running: `start` returning 0 means "ready"
  local i
  for i in "${!ours[@]}"; do
    name="${ours[$i]}"
    wait_ready "$name"
    [[ "${states[$i]}" == launched ]] && \
      log "$name ready on $(address_of "$name") (pid $(running_pid "$name"), $((SECONDS - t_start[i])) s)"
  done
  if secure_on; then secure_start "$@"; fi
  if cluster_on; then cluster_start "$@"; fi
  log "all requested services up ($((SECONDS - t0)) s); logs in $LOG_DIR"
}

stop_one() {
  local name="$1" pid
  if ! pid="$(running_pid "$name")"; then
    rm -f "$(pid_file "$name")"
    log "$name not running (none started from $CACHE_DIR)"
    return 0
  fi
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + STOP_TIMEOUT))
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS >= deadline)); then
      log "$name did not exit within ${STOP_TIMEOUT}s after SIGTERM; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.5
      break
    fi
    sleep 0.2
  done
  rm -f "$(pid_file "$name")"
  log "$name stopped"
}

cmd_stop() {
  local name i
  # reverse order: Prometheus before what it scrapes/alerts to, Kafka last
  for ((i = $# ; i >= 1 ; i--)); do
    name="${!i}"
    [[ "$name" == redis ]] && { secure_redis_stop; cluster_stop; }
    stop_one "$name"
  done
}

cmd_status() {
  local name pid
  for name in "$@"; do
    if pid="$(running_pid "$name")"; then
      printf '%-13s running  pid %-8s %s\n' "$name" "$pid" "$(address_of "$name")"
    elif port_open "$(port_of "$name")" && probe "$name"; then
      printf '%-13s running  pid %-8s %s (external: not started from %s)\n' \
        "$name" "?" "$(address_of "$name")" "$CACHE_DIR"
    else
      printf '%-13s stopped  %-12s %s\n' "$name" "" "$(address_of "$name")"
    fi
    if [[ "$name" == redis ]]; then secure_status; cluster_status; fi
  done
}

cmd_reload() {
  local name
  for name in "$@"; do
    case "$name" in
      prometheus)
        write_prometheus_config
        http_post "http://$HOST:$PROM_PORT/-/reload" && log "prometheus reloaded" ;;
      alertmanager)
        write_alertmanager_config
        http_post "http://$HOST:$AM_PORT/-/reload" && log "alertmanager reloaded" ;;
      *) log "$name: nothing to reload" ;;
    esac
  done
}

usage() {
  cat >&2 <<EOF
usage: $0 start|stop|status|restart|reload [${ALL_SERVICES[*]}]
       $0 kafka-tool topics|console-consumer|consumer-groups|configs|get-offsets [tool args...]
EOF
  exit 2
}

main() {
  local cmd="${1:-}"
  [[ -n "$cmd" ]] || usage
  shift
  if [[ "$cmd" == kafka-tool ]]; then kafka_tool_main "$@"; return; fi
  local -a names=()
  local n a ok
  for n in "$@"; do
    ok=0
    for a in "${ALL_SERVICES[@]}"; do [[ "$n" == "$a" ]] && ok=1; done
    [[ "$ok" == 1 ]] || { log "unknown service: $n"; usage; }
  done
  # keep the canonical order whatever order the names came in
  for a in "${ALL_SERVICES[@]}"; do
    if (($# == 0)); then names+=("$a"); continue; fi
    for n in "$@"; do [[ "$n" == "$a" ]] && { names+=("$a"); break; }; done
  done

  case "$cmd" in
    status) cmd_status "${names[@]}"; return ;;
    start|stop|restart|reload) ;;
    *) usage ;;
  esac

  ensure_tools
  # one start/stop at a time per cache folder (parallel test sessions call start)
  exec 9>"$CACHE_DIR/.lock"
  flock -w 600 9 || die "could not take the lock $CACHE_DIR/.lock within 600 s"
  case "$cmd" in
    start) ensure_test_tools; cmd_start "${names[@]}" ;;
    stop) cmd_stop "${names[@]}" ;;
    restart) cmd_stop "${names[@]}"; cmd_start "${names[@]}" ;;
    reload) cmd_reload "${names[@]}" ;;
  esac
}

main "$@"
