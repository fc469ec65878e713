# shellcheck shell=bash
# fleetmon local services: the Kafka command-line tools, sourced by scripts/services.sh.
#
#   bash scripts/services.sh kafka-tool topics --bootstrap-server 127.0.0.1:9092 --list
#   bash scripts/services.sh kafka-tool console-consumer --bootstrap-server 127.0.0.1:9092 \
#        --topic fleetmon.traces.dlq --from-beginning --timeout-ms 10000
#   bash scripts/services.sh kafka-tool consumer-groups --bootstrap-server 127.0.0.1:9092 --describe --group fleetmon
#
# Each name is the distribution's bin/kafka-<name>.sh; the arguments are that
# tool's own. The jars come from Maven Central (services/tools/pom.xml) into
# <cache>/kafka-tools on first use (re-fetched when that pom changes); `configs`
# and `console-producer` are in the broker's jars (<cache>/kafka-libs).
# Against the secure listener add the client properties services.sh wrote:
# --command-config (topics, consumer-groups, configs, get-offsets) or
# --consumer.config (console-consumer) <cache>/secure/client.properties.

KAFKA_TOOLS="$CACHE_DIR/kafka-tools"
TOOLS_POM="$REPO_DIR/services/tools/pom.xml"

kafka_tool_class() {
  case "$1" in
    topics) echo org.apache.kafka.tools.TopicCommand ;;
    console-consumer) echo org.apache.kafka.tools.consumer.ConsoleConsumer ;;
    consumer-groups) echo org.apache.kafka.tools.consumer.group.ConsumerGroupCommand ;;
    get-offsets) echo org.apache.kafka.tools.GetOffsetShell ;;
    configs) echo kafka.admin.ConfigCommand ;;
    console-producer) echo kafka.tools.ConsoleProducer ;;
    *) return 1 ;;
  esac
}

ensure_kafka_tools() {
  local stamp="$KAFKA_TOOLS/.fetched-from-pom" want
  want="$(sha256sum "$TOOLS_POM" | cut -d' ' -f1)"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]] && compgen -G "$KAFKA_TOOLS/kafka-tools-*.jar" >/dev/null; then
    return 0
  fi
  need_cmd java default-jre-headless
  need_cmd mvn maven
  log "fetching the Kafka tools from Maven Central (services/tools/pom.xml) into $KAFKA_TOOLS"
  local tmp="$KAFKA_TOOLS.tmp.$$"
  rm -rf "$tmp"
  if ! mvn -B -q -f "$TOOLS_POM" dependency:copy-dependencies -DoutputDirectory="$tmp" \
       >"$LOG_DIR/maven-tools.log" 2>&1; then
    rm -rf "$tmp"
    tail_log "$LOG_DIR/maven-tools.log"
    die "could not fetch the Kafka tools with Maven (full log: $LOG_DIR/maven-tools.log)"
  fi
  echo "$want" >"$tmp/.fetched-from-pom"
  rm -rf "$KAFKA_TOOLS"
  mv "$tmp" "$KAFKA_TOOLS"
}

kafka_tool_main() {  # tool [args...]
  local tool="${1:-}" class cp
  class="$(kafka_tool_class "$tool")" || {
    log "kafka-tool: unknown tool '${tool}'; one of: topics console-consumer consumer-groups get-offsets configs console-producer"
    exit 2
  }
  shift
  ensure_tools
  case "$tool" in
    configs|console-producer)
      [[ -d "$KAFKA_LIBS" ]] && compgen -G "$KAFKA_LIBS/kafka_2.13-*.jar" >/dev/null \
        || die "the broker's jars are not fetched yet: run bash scripts/services.sh start kafka first"
      cp="$KAFKA_LIBS/*" ;;
    *)
      (flock -w 600 8 || die "could not take the lock $CACHE_DIR/.tools.lock"; ensure_kafka_tools) 8>"$CACHE_DIR/.tools.lock"
      cp="$KAFKA_TOOLS/*" ;;
  esac
  local log4j="$CACHE_DIR/kafka-tools-log4j.properties"
  [[ -s "$log4j" ]] || printf '%s\n' 'log4j.rootLogger=WARN, stderr' \
    'log4j.appender.stderr=org.apache.log4j.ConsoleAppender' \
    'log4j.appender.stderr.layout=org.apache.log4j.PatternLayout' \
    'log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n' \
    'log4j.appender.stderr.Target=System.err' >"$log4j"
  exec java -Xmx512m -Dlog4j.configuration="file:$log4j" -cp "$cp" "$class" "$@"
}
