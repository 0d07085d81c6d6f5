import DatongContracts

/// The `$` names that are Sensors' own: those the official SDKs write and those Sensors' server adds.
/// A strict project (`ProjectCatalogSettings.strict`) keeps these without their being declared, and
/// no other `$` name: a made-up `$Fake` event or `$my_` property is undeclared like any other.
///
/// `events` and `properties` are what `Tests/Fixtures/sdk-names.sh` prints for the Android,
/// JavaScript, mini-program, Java, Go, Python, PHP, Ruby, C++ and Node SDKs' source (the iOS SDK's
/// repository holds it compiled; it writes the Android SDK's names), less strings there that name
/// no record's event or property: `$appVersion`, `$date`, `$dateTime`, `$date_time`, `$id`,
/// `$identity_mp_`, `$key`, `$latest`, `$latest_`, `$latest_abc`, `$libDetail`, `$libMethod`,
/// `$lvalue`, `$mp_`, `$option`, `$super`, `$userAgent`, `$utms`.
enum SDKNames {
    /// `$` names of the SDKs' events (`$AppStart`, `$pageview`, …).
    static let events: Set<String> = [
        "$ABTestTrigger", "$AdAppDeferredDeepLinkJump", "$AdDynamicSlinkCreate", "$AppClick", "$AppDataTrackingClose", "$AppDeeplinkLaunch",
        "$AppDeeplinkMatchedResult", "$AppEnd", "$AppInstall", "$AppInteract", "$AppPageLeave", "$AppPushClick",
        "$AppRemoteConfigChanged", "$AppStart", "$AppViewScreen", "$BindID", "$ChannelDebugInstall", "$ChannelLinkReaching",
        "$MPAddFavorites", "$MPClick", "$MPHide", "$MPLaunch", "$MPPageLeave", "$MPShare",
        "$MPShow", "$MPViewScreen", "$PlanPopupClick", "$PlanPopupDisplay", "$SignUp", "$UnbindID",
        "$WebClick", "$WebPageLeave", "$WebPageLoad", "$WebStay", "$pageview",
    ]

    /// `$` names of the SDKs' properties, and those Sensors' server adds to records
    /// (`$ip`, `$country`, `$province`, `$city`, `$url_host`), and `$is_bot`, which Datong's gateway adds.
    static let properties: Set<String> = [
        "$abtest_experiment_group_id", "$abtest_experiment_id", "$ad_app_match_type", "$ad_custom_data_type", "$ad_deeplink_channel_info", "$ad_device_info",
        "$ad_dynamic_slink_channel_name", "$ad_dynamic_slink_channel_type", "$ad_dynamic_slink_data", "$ad_dynamic_slink_msg", "$ad_dynamic_slink_short_url",
        "$ad_dynamic_slink_source",
        "$ad_dynamic_slink_status", "$ad_landing_page_url", "$ad_slink_id", "$ad_slink_template_id", "$ad_slink_type", "$anonymization_id",
        "$anonymous_id", "$app_id", "$app_name", "$app_push_channel", "$app_push_msg_content", "$app_push_msg_title",
        "$app_push_service_name", "$app_remote_config", "$app_version", "$brand", "$browser", "$browser_version",
        "$carrier", "$channel_device_info", "$city", "$deeplink_match_fail_reason", "$deeplink_options", "$deeplink_url",
        "$device_id", "$element_class_name", "$element_content", "$element_id", "$element_name", "$element_path",
        "$element_position", "$element_selector", "$element_target_url", "$element_type", "$event_duration", "$event_session_id",
        "$first_browser_charset", "$first_browser_language", "$first_referrer", "$first_referrer_host", "$first_search_keyword", "$first_traffic_source_type",
        "$first_visit_time", "$gaid", "$geo_coordinate_system", "$identity_android_id", "$identity_android_uuid", "$identity_anonymous_id",
        "$identity_cookie_id", "$identity_email", "$identity_login", "$identity_login_id", "$identity_mobile", "$identity_mp_id",
        "$identity_mp_openid", "$identity_mp_unionid", "$ios_install_disable_callback", "$ios_install_source", "$ip", "$is_bot", "$is_channel_callback_event",
        "$is_first_day", "$is_first_time", "$is_login_id", "$latest_landing_page", "$latest_referrer", "$latest_referrer_host",
        "$latest_sa_utm", "$latest_scene", "$latest_search_keyword", "$latest_sf_source", "$latest_share_depth", "$latest_share_distinct_id",
        "$latest_share_method", "$latest_share_url_path", "$latest_traffic_source_type", "$latest_utm", "$latest_utm_campaign", "$latest_utm_content",
        "$latest_utm_medium", "$latest_utm_source", "$latest_utm_term", "$latest_wx_ad_callbacks", "$latest_wx_ad_click_id", "$latest_wx_ad_hash_key",
        "$latitude", "$lib", "$lib_detail", "$lib_method", "$lib_plugin_version", "$lib_version",
        "$longitude", "$manufacturer", "$model", "$mp_client_app_version", "$mp_client_basic_library_version", "$mp_id",
        "$mp_openid", "$mp_unionid", "$name", "$network_type", "$oaid", "$os",
        "$os_version", "$page_height", "$page_resource_size", "$page_x", "$page_y", "$project",
        "$province", "$referrer", "$referrer_host", "$referrer_title", "$resume_from_background", "$sa_channel_landing_url_error",
        "$sat_awake_from_deeplink", "$sat_event_track_id", "$sat_has_installed_app", "$sat_slink_custom_params", "$scene", "$screen_height",
        "$screen_name", "$screen_orientation", "$screen_width", "$sdk_bridge_status", "$search_keyword_id", "$search_keyword_id_hash",
        "$search_keyword_id_type", "$sf_audience_id", "$sf_channel_category", "$sf_channel_id", "$sf_channel_service_name", "$sf_close_type",
        "$sf_enter_plan_time", "$sf_fail_reason", "$sf_internal_anonymous_id", "$sf_internal_login_id", "$sf_lib_version", "$sf_link_url",
        "$sf_msg_action_id", "$sf_msg_content", "$sf_msg_element_action", "$sf_msg_element_content", "$sf_msg_element_type", "$sf_msg_id",
        "$sf_msg_image_url", "$sf_msg_title", "$sf_plan_id", "$sf_plan_strategy_id", "$sf_plan_type", "$sf_platform_tag",
        "$sf_section_id", "$sf_source", "$sf_strategy_unit_id", "$sf_succeed", "$share_depth", "$share_distinct_id",
        "$share_method", "$share_url_path", "$signup_time", "$time", "$time_free", "$timezone_offset",
        "$title", "$token", "$track_id", "$url", "$url_path", "$url_query",
        "$user_agent", "$utm_campaign", "$utm_content", "$utm_medium", "$utm_source", "$utm_term",
        "$viewport_height", "$viewport_position", "$viewport_width", "$wifi",
        "$country", "$url_host",
    ]

    /// The JS and mini-program SDKs build `$latest_` + a traffic source's name at run time
    /// (`$latest_utm_source`, `$latest_traffic_source_type`, `$latest_search_keyword`, …).
    static let propertyPrefixes = ["$latest_"]

    /// Whether a strict project keeps the event `name` undeclared.
    static func isSDKEvent(_ name: String) -> Bool { events.contains(name) }

    /// Whether a strict project keeps the property `name` undeclared.
    static func isSDKProperty(_ name: String) -> Bool {
        properties.contains(name) || SensorsType.presets[name] != nil || propertyPrefixes.contains { name.hasPrefix($0) }
    }
}
