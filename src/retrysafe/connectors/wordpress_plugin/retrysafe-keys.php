<?php
/**
 * Plugin Name: retrysafe keys
 * Description: Lets retrysafe find the post it created for a step key: registers the
 *              `retrysafe_key` post meta field for the REST API and adds a `retrysafe_key`
 *              query parameter to every REST post collection (/wp/v2/posts, /wp/v2/pages...).
 * Version:     1
 * License:     Apache-2.0
 *
 * Install as a must-use plugin: copy this file into wp-content/mu-plugins/.
 * WordPress core ignores meta_key/meta_value on /wp/v2/posts, so without this
 * file a lookup by key would see every post.
 */

if ( ! defined( 'ABSPATH' ) ) {
	exit;
}

const RETRYSAFE_KEY_META = 'retrysafe_key';

add_action(
	'init',
	function () {
		// '' = every post type; the key is one string per post, written at creation.
		register_post_meta(
			'',
			RETRYSAFE_KEY_META,
			array(
				'type'          => 'string',
				'single'        => true,
				'show_in_rest'  => true,
				'description'   => 'The retrysafe step key that created this post.',
				'auth_callback' => function ( $allowed, $meta_key, $post_id ) {
					return current_user_can( 'edit_post', $post_id );
				},
			)
		);
	}
);

add_action(
	'rest_api_init',
	function () {
		foreach ( get_post_types( array( 'show_in_rest' => true ), 'names' ) as $post_type ) {
			add_filter(
				"rest_{$post_type}_collection_params",
				function ( $params ) {
					$params[ RETRYSAFE_KEY_META ] = array(
						'description' => 'Only posts whose retrysafe step key is exactly this value.',
						'type'        => 'string',
					);
					return $params;
				}
			);
			add_filter(
				"rest_{$post_type}_query",
				function ( $args, $request ) {
					$key = $request->get_param( RETRYSAFE_KEY_META );
					if ( is_string( $key ) && '' !== $key ) {
						// Keys are private to the people who may edit the posts.
						if ( ! current_user_can( 'edit_posts' ) ) {
							$args['post__in'] = array( 0 );
							return $args;
						}
						$meta_query   = isset( $args['meta_query'] ) && is_array( $args['meta_query'] ) ? $args['meta_query'] : array();
						$meta_query[] = array(
							'key'     => RETRYSAFE_KEY_META,
							'value'   => $key,
							'compare' => '=',
							'type'    => 'BINARY', // exact: the column's collation ignores case
						);
						$args['meta_query'] = $meta_query;
					}
					return $args;
				},
				10,
				2
			);
		}
	}
);
