# shellcheck shell=bash
# fleetmon local services, the secure half: sourced by scripts/services.sh.
#
# With FLEETMON_SERVICES_SECURE=1, `services.sh start` also brings up
#   * a SASL_SSL listener on the one Kafka broker (127.0.0.1:${FLEETMON_KAFKA_SECURE_PORT:-9096}),
#     SCRAM-SHA-512, user "fleetmon", TLS with a broker certificate signed by a local CA;
#   * a TLS-only Redis (127.0.0.1:${FLEETMON_REDIS_TLS_PORT:-6380}) with ACL user "fleetmon"
#     (the default user is off), beside the plain Redis;
# and writes <cache>/secure/fleetmon.toml (mode 0600), a configuration every
# fleetmon command takes with --config. Everything secret (passwords, keys)
# lives in <cache>/secure/, generated once with openssl and kept; delete that
# folder to rotate all of it. See docs/operating.md "Secure transports".
#
# Unset FLEETMON_SERVICES_SECURE: nothing here runs at start, and the
# generated broker configuration is the plain one.

SECURE="${FLEETMON_SERVICES_SECURE:-0}"
SECURE_DIR="$CACHE_DIR/secure"
KAFKA_SECURE_PORT="${FLEETMON_KAFKA_SECURE_PORT:-9096}"
REDIS_TLS_PORT="${FLEETMON_REDIS_TLS_PORT:-6380}"
REDIS_SECURE_DIR="$CACHE_DIR/redis-secure"
SECURE_USER=fleetmon

secure_on() { [[ "$SECURE" == 1 ]]; }

# -- secrets and certificates (generated once, kept) ---------------------------

secure_material() {
  need_cmd openssl openssl
  mkdir -p "$SECURE_DIR"
  chmod 700 "$SECURE_DIR"
  local secrets="$SECURE_DIR/secrets.env" d="$SECURE_DIR"
  if [[ ! -s "$secrets" ]]; then
    (umask 077
     printf 'KAFKA_PASSWORD=%s\nREDIS_PASSWORD=%s\nKEYSTORE_PASSWORD=%s\n' \
       "$(openssl rand -hex 24)" "$(openssl rand -hex 24)" "$(openssl rand -hex 24)" >"$secrets.tmp")
    mv "$secrets.tmp" "$secrets"
  fi
  # shellcheck disable=SC1090  # generated above
  source "$secrets"
  [[ -s "$d/ca.pem" && -s "$d/server.pem" && -s "$d/server.key" && -s "$d/server.p12" ]] && return 0
  log "generating a local CA and a server certificate for 127.0.0.1 in $SECURE_DIR (openssl)"
  secure_generate "$d" >>"$LOG_DIR/secure.log" 2>&1 \
    || { tail_log "$LOG_DIR/secure.log"; die "could not generate the TLS material (log: $LOG_DIR/secure.log)"; }
}

secure_generate() {  # dir; every step checked (errexit is off under ||)
  local d="$1"
  (umask 077
   export KEYSTORE_PASSWORD
   openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 -subj "/CN=fleetmon local test CA" \
     -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
     -keyout "$d/ca.key" -out "$d/ca.pem" || exit 1
   openssl req -newkey rsa:2048 -nodes -sha256 -subj "/CN=localhost" -keyout "$d/server.key" \
     -out "$d/server.csr" || exit 1
   printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n' \
     >"$d/server.ext"
   openssl x509 -req -sha256 -days 825 -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" \
     -CAcreateserial -extfile "$d/server.ext" -out "$d/server.pem" || exit 1
   openssl verify -CAfile "$d/ca.pem" "$d/server.pem" || exit 1
   # the broker's keystore (PKCS12, what the JDK reads natively), checked with the JDK's keytool
   openssl pkcs12 -export -name broker -in "$d/server.pem" \
     -inkey "$d/server.key" -certfile "$d/ca.pem" -passout "env:KEYSTORE_PASSWORD" -out "$d/server.p12.tmp" || exit 1
   if command -v keytool >/dev/null 2>&1; then
     keytool -list -storetype PKCS12 -keystore "$d/server.p12.tmp" -storepass:env KEYSTORE_PASSWORD >/dev/null \
       || exit 1
   fi
   mv "$d/server.p12.tmp" "$d/server.p12"
   chmod 644 "$d/ca.pem"
  )
}

# -- Kafka: a SASL_SSL listener on the broker ----------------------------------

# Called at the end of write_kafka_config when secure: the listener, its TLS
# keystore and SCRAM-SHA-512 as its only mechanism. Inter-broker traffic and
# the controller stay PLAINTEXT on loopback.
secure_kafka_config() {
  local props="$KAFKA_DIR/config/server.properties"
  secure_material
  sed -i \
    -e "s|^listeners=PLAINTEXT://\([^,]*\),|listeners=PLAINTEXT://\1,SASL_SSL://$HOST:$KAFKA_SECURE_PORT,|" \
    -e "s|^advertised.listeners=PLAINTEXT://\(.*\)$|advertised.listeners=PLAINTEXT://\1,SASL_SSL://$HOST:$KAFKA_SECURE_PORT|" \
    -e "s|^listener.security.protocol.map=\(.*\)$|listener.security.protocol.map=\1,SASL_SSL:SASL_SSL|" \
    "$props"
  chmod 600 "$props"
  cat >>"$props" <<EOF
# FLEETMON_SERVICES_SECURE=1: SASL_SSL (SCRAM-SHA-512) on $HOST:$KAFKA_SECURE_PORT
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.ssl.keystore.type=PKCS12
listener.name.sasl_ssl.ssl.keystore.location=$SECURE_DIR/server.p12
listener.name.sasl_ssl.ssl.keystore.password=$KEYSTORE_PASSWORD
listener.name.sasl_ssl.ssl.key.password=$KEYSTORE_PASSWORD
listener.name.sasl_ssl.ssl.client.auth=none
EOF
}

# The SCRAM credential lives in the cluster metadata: (re)written through the
# PLAINTEXT listener when this cluster has not got the current password yet.
secure_kafka_user() {
  local cid stamp want
  cid="$(cat "$KAFKA_DIR/cluster.id" 2>/dev/null || true)"
  stamp="$SECURE_DIR/.scram-user"
  want="$cid $(printf '%s' "$KAFKA_PASSWORD" | sha256sum | cut -d' ' -f1)"
  [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]] && return 0
  log "adding the SCRAM-SHA-512 user $SECURE_USER to Kafka"
  [[ -n "$KAFKA_PY" ]] || find_kafka_python
  local rc=0
  if [[ "$KAFKA_PY" != none ]]; then
    # the password goes through the environment, never a command line or a log
    KAFKA_PASSWORD="$KAFKA_PASSWORD" timeout 60 "$KAFKA_PY" - "$HOST:$KAFKA_PORT" "$SECURE_USER" <<'PY' \
      >>"$LOG_DIR/secure.log" 2>&1 || rc=$?
import os, sys
from kafka.admin import KafkaAdminClient, UserScramCredentialUpsertion
admin = KafkaAdminClient(bootstrap_servers=sys.argv[1], client_id="fleetmon-services-scram", request_timeout_ms=10000)
try:
    result = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(sys.argv[2], "SCRAM-SHA-512", os.environ["KAFKA_PASSWORD"], iterations=8192)])
finally:
    admin.close()
error = result.get(sys.argv[2])
print(f"SCRAM-SHA-512 credential of {sys.argv[2]}: {error or 'ok'}")
sys.exit(1 if error else 0)
PY
  else  # no kafka-python yet (a machine without the venv): the broker's own ConfigCommand, whose
        # only way to take the password is its command line (visible in ps for the moment it runs)
    java -Xmx256m -Dlog4j.configuration="file:$KAFKA_DIR/config/tools-log4j.properties" \
      -cp "$KAFKA_LIBS/*" kafka.admin.ConfigCommand --bootstrap-server "$HOST:$KAFKA_PORT" \
      --alter --entity-type users --entity-name "$SECURE_USER" \
      --add-config "SCRAM-SHA-512=[iterations=8192,password=$KAFKA_PASSWORD]" >/dev/null 2>&1 || rc=$?
  fi
  ((rc == 0)) || { tail_log "$LOG_DIR/secure.log"; die "could not add the Kafka SCRAM user $SECURE_USER (exit $rc)"; }
  echo "$want" >"$stamp"
}

# Authenticates over the secure listener (kafka-python when the venv has it).
secure_kafka_answers() {
  port_open "$KAFKA_SECURE_PORT" || return 1
  [[ -n "$KAFKA_PY" ]] || find_kafka_python
  [[ "$KAFKA_PY" == none ]] && return 0
  KAFKA_PASSWORD="$KAFKA_PASSWORD" timeout 20 "$KAFKA_PY" - "$HOST:$KAFKA_SECURE_PORT" "$SECURE_USER" \
    "$SECURE_DIR/ca.pem" <<'PY' >>"$LOG_DIR/secure.log" 2>&1
import os, sys
from kafka.admin import KafkaAdminClient
admin = KafkaAdminClient(bootstrap_servers=sys.argv[1], client_id="fleetmon-services-ready",
                         security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                         sasl_plain_username=sys.argv[2], sasl_plain_password=os.environ["KAFKA_PASSWORD"],
                         ssl_cafile=sys.argv[3], request_timeout_ms=5000)
try:
    sys.exit(0 if admin.describe_cluster().get("brokers") else 1)
finally:
    admin.close()
PY
}

secure_kafka() {
  if ! port_open "$KAFKA_SECURE_PORT"; then
    die "kafka is running without its SASL_SSL listener on $HOST:$KAFKA_SECURE_PORT (it was started without" \
        "FLEETMON_SERVICES_SECURE=1); restart it once: FLEETMON_SERVICES_SECURE=1 bash scripts/services.sh restart kafka"
  fi
  secure_kafka_user
  local deadline=$((SECONDS + READY_TIMEOUT))
  until secure_kafka_answers; do
    if ((SECONDS >= deadline)); then
      tail_log "$LOG_DIR/secure.log"
      die "kafka's SASL_SSL listener $HOST:$KAFKA_SECURE_PORT did not authenticate user $SECURE_USER within ${READY_TIMEOUT}s"
    fi
    sleep 1
  done
}

# -- Redis: a TLS-only server with an ACL user ---------------------------------

secure_redis_pid() {  # the pid when our TLS Redis runs
  local pf="$RUN_DIR/redis-secure.pid" pid
  [[ -s "$pf" ]] || return 1
  pid="$(tr -dc '0-9' <"$pf")"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
  [[ "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" == *redis-server* ]] || return 1
  echo "$pid"
}

secure_redis_ping() {
  [[ "$(REDISCLI_AUTH="$REDIS_PASSWORD" redis-cli --tls --cacert "$SECURE_DIR/ca.pem" -h "$HOST" \
        -p "$REDIS_TLS_PORT" --user "$SECURE_USER" --no-auth-warning ping 2>/dev/null)" == PONG ]]
}

secure_redis() {
  local pid hash
  if pid="$(secure_redis_pid)"; then
    secure_redis_ping || die "the TLS Redis (pid $pid) on $HOST:$REDIS_TLS_PORT does not accept user $SECURE_USER"
    return 0
  fi
  if port_open "$REDIS_TLS_PORT"; then
    die "port $REDIS_TLS_PORT for the TLS Redis is taken by another program ($(port_owner "$REDIS_TLS_PORT"));" \
        "stop it or set FLEETMON_REDIS_TLS_PORT"
  fi
  mkdir -p "$REDIS_SECURE_DIR"
  hash="$(printf '%s' "$REDIS_PASSWORD" | sha256sum | cut -d' ' -f1)"
  (umask 077; cat >"$REDIS_SECURE_DIR/redis.conf" <<EOF
# generated by scripts/services.sh (FLEETMON_SERVICES_SECURE=1): TLS only, ACL user $SECURE_USER
bind $HOST
port 0
tls-port $REDIS_TLS_PORT
tls-cert-file $SECURE_DIR/server.pem
tls-key-file $SECURE_DIR/server.key
tls-ca-cert-file $SECURE_DIR/ca.pem
tls-auth-clients no
protected-mode yes
daemonize yes
supervised no
pidfile $RUN_DIR/redis-secure.pid
logfile $LOG_DIR/redis-secure.log
dir $REDIS_SECURE_DIR
save ""
appendonly no
databases 64
user default off
user $SECURE_USER on #$hash ~* &* +@all -@admin
EOF
  )
  rm -f "$RUN_DIR/redis-secure.pid"
  printf '\n===== redis-secure start %s =====\n' "$(date -Is)" >>"$LOG_DIR/redis-secure.log"
  if ! redis-server "$REDIS_SECURE_DIR/redis.conf" >>"$LOG_DIR/redis-secure.log" 2>&1 9>&-; then
    tail_log "$LOG_DIR/redis-secure.log"
    die "the TLS redis-server failed to start"
  fi
  local deadline=$((SECONDS + READY_TIMEOUT))
  until secure_redis_ping; do
    if ((SECONDS >= deadline)); then
      tail_log "$LOG_DIR/redis-secure.log"
      die "the TLS Redis on $HOST:$REDIS_TLS_PORT did not answer within ${READY_TIMEOUT}s"
    fi
    sleep 0.2
  done
  log "redis (TLS, ACL user $SECURE_USER) ready on rediss://$HOST:$REDIS_TLS_PORT (pid $(secure_redis_pid))"
}

secure_redis_stop() {  # also when FLEETMON_SERVICES_SECURE is unset: `stop` ends what `start` began
  local pid
  pid="$(secure_redis_pid)" || return 0
  log "stopping redis-secure (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + STOP_TIMEOUT))
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS >= deadline)); then kill -KILL "$pid" 2>/dev/null || true; sleep 0.5; break; fi
    sleep 0.2
  done
  rm -f "$RUN_DIR/redis-secure.pid"
  log "redis-secure stopped"
}

secure_status() {
  local pid
  if pid="$(secure_redis_pid)"; then
    printf '%-13s running  pid %-8s %s\n' redis-secure "$pid" "rediss://$HOST:$REDIS_TLS_PORT (user $SECURE_USER)"
  fi
}

# -- the configuration fleetmon commands take ----------------------------------

secure_write_config() {
  local toml="$SECURE_DIR/fleetmon.toml"
  (umask 077; cat >"$toml.tmp" <<EOF
# generated by scripts/services.sh (FLEETMON_SERVICES_SECURE=1); secrets inside: keep it 0600.
# Every fleetmon command takes it: fleetmon <command> --config $toml
[kafka]
bootstrap = "$HOST:$KAFKA_SECURE_PORT"
security_protocol = "SASL_SSL"
sasl_mechanism = "SCRAM-SHA-512"
sasl_username = "$SECURE_USER"
sasl_password = "$KAFKA_PASSWORD"
ssl_cafile = "$SECURE_DIR/ca.pem"

[redis]
url = "rediss://$SECURE_USER:$REDIS_PASSWORD@$HOST:$REDIS_TLS_PORT/0?ssl_ca_certs=$SECURE_DIR/ca.pem"
EOF
  )
  chmod 600 "$toml.tmp"
  mv "$toml.tmp" "$toml"
  # the same credentials for the Kafka command-line tools (services.sh kafka-tool ... --command-config)
  (umask 077; cat >"$SECURE_DIR/client.properties" <<EOF
# generated by scripts/services.sh (FLEETMON_SERVICES_SECURE=1): Kafka tools against $HOST:$KAFKA_SECURE_PORT
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="$SECURE_USER" password="$KAFKA_PASSWORD";
ssl.truststore.type=PEM
ssl.truststore.location=$SECURE_DIR/ca.pem
EOF
  )
}

# After the plain start: the secure parts of the components just started.
secure_start() {  # names...
  local name want_kafka=0 want_redis=0
  for name in "$@"; do
    [[ "$name" == kafka ]] && want_kafka=1
    [[ "$name" == redis ]] && want_redis=1
  done
  ((want_kafka + want_redis)) || return 0
  secure_material
  ((want_redis)) && secure_redis
  ((want_kafka)) && secure_kafka
  secure_write_config
  log "secure services up: kafka SASL_SSL $HOST:$KAFKA_SECURE_PORT, rediss://$HOST:$REDIS_TLS_PORT;" \
      "config $SECURE_DIR/fleetmon.toml"
}
