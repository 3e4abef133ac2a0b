// The type each generated dashboard must satisfy: @grafana/schema's Dashboard, with each panel's
// `options` and `fieldConfig.defaults.custom` narrowed to the panel plugin's own types (Grafana
// types them as Record<string, unknown>, which would accept any field). check.sh emits every
// dashboard as an object literal typed with CheckedDashboard, so tsc rejects unknown fields.
import type {
  Dashboard,
  DataQuery,
  FieldConfig,
  FieldConfigSource,
  Panel,
  RowPanel,
} from '@grafana/schema';
import type * as heatmap from '@grafana/schema/dist/esm/raw/composable/heatmap/panelcfg/x/HeatmapPanelCfg_types.gen';
import type * as stat from '@grafana/schema/dist/esm/raw/composable/stat/panelcfg/x/StatPanelCfg_types.gen';
import type * as timeseries from '@grafana/schema/dist/esm/raw/composable/timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen';

// Grafana's string enums (ThresholdsMode, LegendDisplayMode, ...) as the union of their values:
// JSON holds "absolute", which TypeScript would not assign to the enum ThresholdsMode.Absolute.
// Numeric enums already accept their member values as number literals.
type Json<T> = T extends string
  ? `${T}`
  : T extends number | boolean | null | undefined
    ? T
    : T extends ReadonlyArray<infer U>
      ? Array<Json<U>>
      : { [K in keyof T]: Json<T[K]> };

// A panel of plugin TYPE: Grafana's Panel with that plugin's Options and custom FieldConfig.
// Prometheus queries: @grafana/schema 13.2.3 carries no Prometheus dataquery type, so a target is
// Grafana's common DataQuery plus the datasource's own fields, unchecked (charts/kubecua/README.md).
type PluginPanel<TYPE extends string, Options, Custom> = Omit<
  Panel,
  'type' | 'options' | 'fieldConfig' | 'targets'
> & {
  type: TYPE;
  options?: Options;
  fieldConfig?: Omit<FieldConfigSource, 'defaults'> & {
    defaults: Omit<FieldConfig, 'custom'> & { custom?: Custom };
  };
  targets?: Array<DataQuery & Record<string, unknown>>;
};

type KnownPanel =
  | PluginPanel<'timeseries', timeseries.Options, timeseries.FieldConfig>
  | PluginPanel<'heatmap', heatmap.Options, heatmap.FieldConfig>
  // The stat panel has no custom field config in Grafana's schema.
  | PluginPanel<'stat', stat.Options, never>;

type KnownRow = Omit<RowPanel, 'panels'> & { type: 'row'; panels: KnownPanel[] };

export type CheckedDashboard = Json<
  Omit<Dashboard, 'panels'> & { panels?: Array<KnownPanel | KnownRow> }
>;
