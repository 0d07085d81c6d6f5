#!/usr/bin/perl
# Writes a GeoIP2-City-shaped MaxMind DB with MaxMind's own writer (Debian's
# libmaxmind-db-writer-perl): the test database no one here parses by hand. Usage: write-mmdb.pl OUT
use strict;
use utf8;
use warnings;
use MaxMind::DB::Writer::Tree;

my $out = shift or die "usage: $0 OUT.mmdb\n";
my %types = (
    city => 'map', country => 'map', subdivisions => ['array', 'map'], names => 'map',
    'zh-CN' => 'utf8_string', en => 'utf8_string', iso_code => 'utf8_string', geoname_id => 'uint32',
);
my $tree = MaxMind::DB::Writer::Tree->new(
    ip_version => 6, record_size => 28, database_type => 'Datong-Test-City', languages => ['en', 'zh-CN'],
    description => { en => 'Datong test database' }, map_key_type_callback => sub { $types{ $_[0] } },
    remove_reserved_networks => 0,
);
sub names { my ($zh, $en) = @_; my %n; $n{'zh-CN'} = $zh if defined $zh; $n{en} = $en if defined $en; return { names => \%n } }
# Chinese names in the long form GeoIP2 and DB-IP write; Datong stores Sensors' short form.
$tree->insert_network('1.2.3.0/24', { country => names('中国', 'China'), subdivisions => [names('湖南省', 'Hunan')], city => names('长沙市', 'Changsha') });
$tree->insert_network('1.2.4.0/24', { country => names('中国', 'China'), subdivisions => [names('广西壮族自治区', 'Guangxi')], city => names('南宁市', 'Nanning') });
$tree->insert_network('8.8.8.0/24', { country => names('美国', 'United States') });
$tree->insert_network('41.0.0.0/16', { country => names(undef, 'Kenya'), city => names(undef, 'Nairobi') });
$tree->insert_network('2400:da00::/32', { country => names('中国', 'China'), subdivisions => [names('北京市', 'Beijing')], city => names('北京市', 'Beijing') });
open my $fh, '>:raw', $out or die "cannot write $out: $!\n";
$tree->write_tree($fh);
close $fh;
