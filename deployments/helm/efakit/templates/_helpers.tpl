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
