<?php
/*
 * Installs a fresh WordPress site for the tests (WP-CLI is not packaged in Debian 12):
 * creates the database, runs wp_install() with an administrator, and prints that user's
 * name and a new application password as JSON. Run with php -d auto_prepend_file=...
 * (which defines ABSPATH, so the test site's own wp-config.php is the one loaded).
 * The database settings come from the environment (RS_WP_DB_*).
 */

$host = getenv( 'RS_WP_DB_HOST' );
$port = (int) getenv( 'RS_WP_DB_PORT' );
$name = getenv( 'RS_WP_DB_NAME' );
$db   = new mysqli( $host, getenv( 'RS_WP_DB_USER' ), getenv( 'RS_WP_DB_PASSWORD' ), '', $port );
$db->query( "CREATE DATABASE `$name` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_520_ci" );
$db->close();

define( 'WP_INSTALLING', true );
require ABSPATH . 'wp-load.php';
require_once ABSPATH . 'wp-admin/includes/upgrade.php';

$user   = 'editor';
$result = wp_install( 'retrysafe test site', $user, 'editor@example.test', true, '', wp_generate_password( 24 ) );
list( $password ) = WP_Application_Passwords::create_new_application_password(
	$result['user_id'],
	array( 'name' => 'retrysafe tests' )
);
// A second editor, for whom the test-only plugin switches retrysafe-keys.php off.
$other = wp_insert_user(
	array(
		'user_login' => 'noplugin',
		'user_pass'  => wp_generate_password( 24 ),
		'user_email' => 'noplugin@example.test',
		'role'       => 'editor',
	)
);
list( $other_password ) = WP_Application_Passwords::create_new_application_password(
	$other,
	array( 'name' => 'retrysafe tests' )
);
echo json_encode(
	array(
		'user'           => $user,
		'password'       => $password,
		'other_user'     => 'noplugin',
		'other_password' => $other_password,
	)
);
