{{- define "efakit.name" -}}{{ .Release.Name }}{{- end -}}
{{- define "efakit.labels" -}}
app.kubernetes.io/name: efakit
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}
{{- define "efakit.selector" -}}
app.kubernetes.io/name: efakit
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
{{- define "efakit.serviceAccount" -}}{{ include "efakit.name" . }}-plugin{{- end -}}
{{- /* The plugin's own directory in the kubelet's plugins directory: its
socket, lock file, checkpoint and device metadata, at the same path in the
container as on the host (the kubelet dials the socket by its host path). */ -}}
{{- define "efakit.pluginDataDir" -}}{{ trimSuffix "/" .Values.kubelet.pluginsDir }}/{{ .Values.driverName }}{{- end -}}
{{- define "efakit.sysfsRecursiveReadOnly" -}}
{{- $v := .Values.sysfsRecursiveReadOnly -}}
{{- if not (has $v (list "Enabled" "IfPossible" "Disabled")) -}}
{{- fail (printf "sysfsRecursiveReadOnly is %v: Enabled, IfPossible or Disabled" $v) -}}
{{- end -}}
{{- $v -}}
{{- end -}}

{{/*
Whether the plugin's role may write its entries of claims' status.devices:
"auto" from Kubernetes 1.36 (where the API server also checks
resourceclaims/driver, scoped to the driver and the plugin's node), true
always, false never. Empty for no.
*/}}
{{- define "efakit.claimStatusRBAC" -}}
{{- $v := toString .Values.claimStatus.rbac -}}
{{- if and .Values.claimStatus.write (or (eq $v "true") (and (eq $v "auto") (semverCompare ">=1.36.0-0" .Capabilities.KubeVersion.Version))) -}}
true
{{- end -}}
{{- end -}}
