<?php
/*
 * Test-only must-use plugin: a REST create of a post whose title contains
 * "[fail after insert]" answers 500 right after WordPress inserted the post and
 * before its meta fields (the retrysafe key) are written, as a request cut short
 * by a fatal error or a killed PHP worker would leave it.
 */

add_action(
	'wp_insert_post',
	function ( $post_id, $post, $update ) {
		if ( ! $update && defined( 'REST_REQUEST' ) && false !== strpos( $post->post_title, '[fail after insert]' ) ) {
			status_header( 500 );
			header( 'Content-Type: application/json' );
			echo '{"code":"internal_server_error","message":"injected after insert"}';
			exit;
		}
	},
	10,
	3
);

/*
 * For the user "noplugin", the site behaves as if retrysafe-keys.php were not
 * installed: the key field is unregistered and the query parameter ignored.
 */
add_filter(
	'rest_pre_dispatch',
	function ( $result ) {
		// After authentication (the user is known), before the route runs.
		$user = wp_get_current_user();
		if ( $user && 'noplugin' === $user->user_login ) {
			unregister_post_meta( '', 'retrysafe_key' );
			remove_all_filters( 'rest_post_query' );
		}
		return $result;
	}
);
