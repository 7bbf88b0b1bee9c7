{{/*
The flags of each program, in the order of its --help: [value key, flag, the program's default,
kind]. Kinds: "always" (passed even with the default, as manifests/ passes --max-unavailable),
"value" (passed as --flag=VALUE when the value differs from the program's default), "list" (one
--flag=ITEM per item), "switch" (a bare --flag when true). e2e/tests/helm.rs checks that every
flag of the programs' --help is here and in values.yaml, with the same default.
*/}}
{{- define "nro.controllerFlags" -}}
{{- list
  (list "maxUnavailable" "max-unavailable" 1 "always")
  (list "nodeSelector" "node-selector" "" "value")
  (list "maxUnavailablePerZone" "max-unavailable-per-zone" "" "value")
  (list "concurrency" "concurrency" "" "value")
  (list "zoneLabel" "zone-label" "topology.kubernetes.io/zone" "value")
  (list "annotationPrefix" "annotation-prefix" "" "value")
  (list "namespace" "namespace" "" "value")
  (list "ledgerName" "ledger-name" "node-reboot-operator-slots" "value")
  (list "drain" "drain" true "value")
  (list "drainTimeout" "drain-timeout" "15m" "value")
  (list "drainGracePeriod" "drain-grace-period" "" "value")
  (list "drainSkipWaitForDeleteMargin" "drain-skip-wait-for-delete-margin" "5m" "value")
  (list "evictionRetryMaxDelay" "eviction-retry-max-delay" "5s" "value")
  (list "drainDelay" "drain-delay" "0s" "value")
  (list "rebootDelay" "reboot-delay" "0s" "value")
  (list "forceReboot" "force-reboot" false "value")
  (list "drainAttempts" "drain-attempts" "" "value")
  (list "maxBlockedNodes" "max-blocked-nodes" "" "value")
  (list "keepSetAsideCordoned" "keep-set-aside-cordoned" false "value")
  (list "canary" "canary" 0 "value")
  (list "canarySoak" "canary-soak" "0s" "value")
  (list "waves" "waves" false "value")
  (list "rebootEstimate" "reboot-estimate" "" "value")
  (list "maxFailures" "max-failures" "" "value")
  (list "drainPodSelector" "drain-pod-selector" "" "value")
  (list "checkDisruptionBudgets" "check-disruption-budgets" true "value")
  (list "agentSelector" "agent-selector" "app.kubernetes.io/name=reboot-agent" "value")
  (list "preflightTimeout" "preflight-timeout" "2m" "value")
  (list "minReadySeconds" "min-ready-seconds" 0 "value")
  (list "rebootTimeout" "reboot-timeout" "30m" "value")
  (list "giveUpAfter" "give-up-after" "" "value")
  (list "rebootWindow" "reboot-window" list "list")
  (list "rebootBlackout" "reboot-blackout" list "list")
  (list "scheduledBudget" "scheduled-budget" list "list")
  (list "finishAfterWindow" "finish-after-window" true "value")
  (list "blockingPodSelector" "blocking-pod-selector" list "list")
  (list "blockingPodSelectorScope" "blocking-pod-selector-scope" "node" "value")
  (list "prometheusUrl" "prometheus-url" "" "value")
  (list "alertFilter" "alert-filter" "" "value")
  (list "alertFilterMode" "alert-filter-mode" "exclude" "value")
  (list "alertFiringOnly" "alert-firing-only" false "value")
  (list "prometheusTimeout" "prometheus-timeout" "10s" "value")
  (list "alertCheckPeriod" "alert-check-period" "30s" "value")
  (list "alertmanagerUrl" "alertmanager-url" "" "value")
  (list "logFormat" "log-format" "text" "value")
  (list "metricsBindAddress" "metrics-bind-address" "0.0.0.0:8080" "value")
  (list "dryRun" "dry-run" false "switch")
  (list "leaderElect" "leader-elect" true "value")
  (list "leaderElectionLeaseName" "leader-election-lease-name" "reboot-controller" "value")
  (list "leaderElectionLeaseDuration" "leader-election-lease-duration" "15s" "value")
  (list "leaderElectionRenewDeadline" "leader-election-renew-deadline" "10s" "value")
  (list "leaderElectionRetryPeriod" "leader-election-retry-period" "2s" "value")
  (list "leaderElectionIdentity" "leader-election-identity" "" "value")
  (list "preRebootNodeLabels" "pre-reboot-node-labels" list "list")
  (list "postRebootNodeLabels" "post-reboot-node-labels" list "list")
  (list "preferNoScheduleTaint" "prefer-no-schedule-taint" "" "value")
  (list "notifyUrl" "notify-url" list "list")
  (list "notifyTimeout" "notify-timeout" "10s" "value")
  (list "messageTemplateDrain" "message-template-drain" "Node {node} drained" "value")
  (list "messageTemplateReboot" "message-template-reboot" "Rebooting node {node}" "value")
  (list "messageTemplateUncordon" "message-template-uncordon" "Node {node} rebooted and uncordoned" "value")
| toJson -}}
{{- end -}}

{{- define "nro.agentFlags" -}}
{{- list
  (list "bootIdFile" "boot-id-file" "/proc/sys/kernel/random/boot_id" "value")
  (list "annotationPrefix" "annotation-prefix" "" "value")
  (list "rebootMethod" "reboot-method" "command" "value")
  (list "rebootCommand" "reboot-command" "systemctl reboot" "value")
  (list "hostMountNamespace" "host-mount-namespace" true "value")
  (list "signalTargetPid" "signal-target-pid" 1 "value")
  (list "rebootSignal" "reboot-signal" 39 "value")
  (list "rebootTimeout" "reboot-timeout" "10m" "value")
  (list "maxUnprovenReboots" "max-unproven-reboots" 3 "value")
  (list "rebootAttemptsFile" "reboot-attempts-file" "/var/lib/reboot-agent/reboot-attempts" "value")
  (list "rebootSentinelFile" "reboot-sentinel-file" "" "value")
  (list "rebootSentinelCommand" "reboot-sentinel-command" "" "value")
  (list "rebootSentinelExitCode" "reboot-sentinel-exit-code" 0 "value")
  (list "checkPeriod" "check-period" "5m" "value")
  (list "logFormat" "log-format" "text" "value")
  (list "metricsBindAddress" "metrics-bind-address" "0.0.0.0:8081" "value")
| toJson -}}
{{- end -}}

{{/* A program's arguments, as a JSON list: (list <flag values> <table of nro.*Flags>). */}}
{{- define "nro.args" -}}
{{- $values := index . 0 -}}
{{- $args := list -}}
{{- range (index . 1 | fromJsonArray) -}}
  {{- $key := index . 0 -}}
  {{- $flag := index . 1 -}}
  {{- $default := index . 2 -}}
  {{- $kind := index . 3 -}}
  {{- $value := index $values $key -}}
  {{- /* Whole numbers from a values file are floats: 1e+06 must be written 1000000. */ -}}
  {{- if and (kindIs "float64" $value) (eq (float64 (int64 $value)) $value) -}}
    {{- $value = int64 $value -}}
  {{- end -}}
  {{- if kindIs "invalid" $value -}}
  {{- else if eq $kind "list" -}}
    {{- range $value -}}
      {{- $args = append $args (printf "--%s=%v" $flag .) -}}
    {{- end -}}
  {{- else if eq $kind "switch" -}}
    {{- if $value -}}
      {{- $args = append $args (printf "--%s" $flag) -}}
    {{- end -}}
  {{- else if or (eq $kind "always") (ne (toJson $value) (toJson $default)) -}}
    {{- $args = append $args (printf "--%s=%v" $flag $value) -}}
  {{- end -}}
{{- end -}}
{{- toJson $args -}}
{{- end -}}

{{/* The port of a --metrics-bind-address (IP:PORT or :PORT); empty for `0` (no server). */}}
{{- define "nro.port" -}}
{{- $address := toString . -}}
{{- if ne $address "0" -}}
{{- regexFind "[0-9]+$" $address -}}
{{- end -}}
{{- end -}}

{{/* An image reference: (list $ <component's image values>). */}}
{{- define "nro.image" -}}
{{- $root := index . 0 -}}
{{- $image := index . 1 -}}
{{- $repository := $image.repository -}}
{{- with $root.Values.image.registry -}}
{{- $repository = printf "%s/%s" (trimSuffix "/" .) $repository -}}
{{- end -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository ($image.tag | default $root.Values.image.tag | default $root.Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The namespace of the slot ledger and the leader Lease. */}}
{{- define "nro.leaseNamespace" -}}
{{- .Values.controller.flags.namespace | default .Release.Namespace -}}
{{- end -}}

{{/* The annotation keys of the agent's protocol steps, with the prefix, as a CEL map. */}}
{{- define "nro.agentKeys" -}}
{{- $keys := list -}}
{{- range list (list "needed" "reboot-needed") (list "now" "reboot-now") (list "inProgress" "reboot-in-progress") (list "bootId" "reboot-boot-id") (list "done" "reboot-done") (list "requestedBy" "reboot-requested-by") (list "sentinel" "reboot-sentinel") -}}
{{- $key := ternary (index . 1) (printf "%s/%s" (trimSuffix "/" $.Values.annotationPrefix) (index . 1)) (empty $.Values.annotationPrefix) -}}
{{- $keys = append $keys (printf "'%s': '%s'" (index . 0) $key) -}}
{{- end -}}
{{- printf "{%s}" (join ", " $keys) -}}
{{- end -}}

{{/*
Fails on a pre-reboot label of a key that places the node: a key of the node selector, the zone
label or the opt-out label (the controller refuses them at start too). Takes the controller's
flags with annotationPrefix. A selector's keys: each requirement's first word, once the value
sets in parentheses are gone.
*/}}
{{- define "nro.checkPreRebootLabels" -}}
{{- $flags := . -}}
{{- $reserved := dict -}}
{{- $selector := regexReplaceAll "\\([^)]*\\)" (toString ($flags.nodeSelector | default "")) "" -}}
{{- range splitList "," $selector -}}
  {{- $key := regexFind "^[^!=\\s]+" (trim (trimPrefix "!" (trim .))) -}}
  {{- if $key -}}
    {{- $_ := set $reserved $key "a key of controller.flags.nodeSelector: set on a node at its grant, it would move the node out of its pool (or into another) during its reboot" -}}
  {{- end -}}
{{- end -}}
{{- with $flags.zoneLabel -}}
  {{- $_ := set $reserved . "controller.flags.zoneLabel: set on a node at its grant, it would move the node into another zone during its reboot" -}}
{{- end -}}
{{- $optOut := "reboot-disabled" -}}
{{- with $flags.annotationPrefix -}}
  {{- $optOut = printf "%s/reboot-disabled" (trimSuffix "/" .) -}}
{{- end -}}
{{- $_ := set $reserved $optOut "the label that opts a node out of reboots" -}}
{{- range $flags.preRebootNodeLabels -}}
  {{- $key := trim (first (splitList "=" (toString .))) -}}
  {{- with get $reserved $key -}}
    {{- fail (printf "controller.flags.preRebootNodeLabels: `%s` is %s; choose another key, such as `node.example.com/rebooting`" $key .) -}}
  {{- end -}}
{{- end -}}
{{- end -}}


{{/* A duration of the flags (`1h30m`, `500ms`) in milliseconds; 0 for empty. */}}
{{- define "nro.ms" -}}
{{- $total := 0 -}}
{{- range regexFindAll "[0-9]+(ms|s|m|h)" (toString .) -1 -}}
  {{- $number := regexFind "^[0-9]+" . -}}
  {{- $unit := trimPrefix $number . -}}
  {{- $total = add $total (mul (atoi $number) (get (dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000) $unit)) -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{/*
Fails on durations of the controller's flags that contradict each other, as the controller
refuses them at start (the schema checks each alone). Takes the controller's flags.
*/}}
{{- define "nro.checkDurations" -}}
{{- $ms := dict -}}
{{- range list "rebootTimeout" "giveUpAfter" "leaderElectionLeaseDuration" "leaderElectionRenewDeadline" "leaderElectionRetryPeriod" -}}
  {{- $_ := set $ms . (include "nro.ms" (index $ .) | atoi) -}}
{{- end -}}
{{- if and .giveUpAfter (lt $ms.giveUpAfter $ms.rebootTimeout) -}}
  {{- fail (printf "controller.flags.giveUpAfter %s is shorter than controller.flags.rebootTimeout %s: a node would be given up before it is even overdue; give giveUpAfter at least rebootTimeout" .giveUpAfter .rebootTimeout) -}}
{{- end -}}
{{- if and (toString .maxBlockedNodes | trim) (not (toString .drainAttempts | trim)) -}}
  {{- fail (printf "controller.flags.maxBlockedNodes %v needs controller.flags.drainAttempts: without it no node is ever set aside; give drainAttempts (such as 3) or leave maxBlockedNodes empty" .maxBlockedNodes) -}}
{{- end -}}
{{- if and .keepSetAsideCordoned (not (toString .drainAttempts | trim)) -}}
  {{- fail "controller.flags.keepSetAsideCordoned needs controller.flags.drainAttempts: without it no node is ever set aside; give drainAttempts (such as 3) or leave keepSetAsideCordoned false" -}}
{{- end -}}
{{- if lt $ms.leaderElectionLeaseDuration 1000 -}}
  {{- fail "controller.flags.leaderElectionLeaseDuration must be at least 1s" -}}
{{- end -}}
{{- if ge $ms.leaderElectionRenewDeadline $ms.leaderElectionLeaseDuration -}}
  {{- fail "controller.flags.leaderElectionRenewDeadline must be shorter than controller.flags.leaderElectionLeaseDuration: the leader must stop acting before another replica may take over" -}}
{{- end -}}
{{- if ge $ms.leaderElectionRetryPeriod $ms.leaderElectionRenewDeadline -}}
  {{- fail "controller.flags.leaderElectionRetryPeriod must be shorter than controller.flags.leaderElectionRenewDeadline: so that the leader renews in time" -}}
{{- end -}}
{{- end -}}
