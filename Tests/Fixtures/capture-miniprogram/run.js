// One phone running a mini program with the official Sensors SDK (Tests/Fixtures/capture-miniprogram.sh):
//   node run.js SDK_FILE SERVER_URL batch|plain PHONE
// Phone 1 browses, logs in as mp-user-1 and changes its profile; phone 2 (another device, new
// storage) browses anonymously, then logs in as the same user.
'use strict';
const shim = require('./wx-shim.js');
const [sdkFile, serverURL, mode, phone] = process.argv.slice(2);
const sa = require(sdkFile);

async function main() {
    sa.setPara({
        name: 'sensors', server_url: serverURL, batch_send: mode === 'batch' ? { send_timeout: 200, max_length: 100 } : false,
        autoTrack: { appLaunch: false, appShow: false, appHide: false, pageShow: false, pageShare: false, mpClick: false, mpFavorite: false },
        show_log: process.env.SHOW_LOG === "1",
    });
    sa.init();
    if (phone === '1') {
        sa.track('ViewItem', { item: 'book-1', price: 10 });
        sa.login('mp-user-1');
        sa.setProfile({ s: 'first' });
        sa.setProfile({ s: 'second' });
        sa.setProfile({ n: 1 });
        sa.incrementProfile({ n: 2 });
        sa.appendProfile({ l: ['a'] });
        sa.appendProfile({ l: ['b'] });
        sa.appendProfile({ l: ['c'] });
        sa.track('Buy', { item: 'book-1', price: 10 });
        sa.track('Buy', { item: 'book-1', price: 10 });
        sa.track('Note', { text: '中'.repeat(3000) });
    } else {
        sa.track('ViewItem', { item: 'book-2', price: 20 });
        sa.login('mp-user-1');
        sa.track('Buy', { item: 'book-2', price: 20 });
    }
    await shim.settle(600);
    shim.hideApp();
    await shim.settle(600);
    process.exit(0);
}
main();
