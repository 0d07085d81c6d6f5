// A small stand-in for the WeChat mini-program runtime, enough for the official Sensors mini-program
// SDK to run in Node (Tests/Fixtures/capture-miniprogram.sh): storage in memory, a fixed device,
// one page, and wx.request as a real HTTP request to the capture server.
'use strict';
const http = require('http');
const { URL } = require('url');

const storage = new Map();
const pending = new Set();
const appHooks = { show: [], hide: [] };

function request(options) {
    const url = new URL(options.url);
    const method = (options.method || 'GET').toUpperCase();
    let body = options.data;
    if (body !== undefined && typeof body !== 'string') {
        // What the WeChat runtime does with an object: a query string for GET, JSON otherwise.
        if (method === 'GET') {
            for (const [key, value] of Object.entries(body)) url.searchParams.set(key, String(value));
            body = undefined;
        } else {
            body = JSON.stringify(body);
        }
    }
    const headers = Object.assign({}, options.header || {});
    if (body !== undefined) headers['content-length'] = Buffer.byteLength(body);
    const done = new Promise((resolve) => {
        const req = http.request(url, { method, headers }, (res) => {
            let text = '';
            res.setEncoding('utf8');
            res.on('data', (chunk) => { text += chunk; });
            res.on('end', () => {
                const answer = { statusCode: res.statusCode, data: text, header: res.headers };
                if (options.success) options.success(answer);
                if (options.complete) options.complete(answer);
                resolve();
            });
        });
        req.on('error', (error) => {
            if (options.fail) options.fail({ errMsg: String(error) });
            if (options.complete) options.complete({ errMsg: String(error) });
            resolve();
        });
        if (body !== undefined) req.write(body);
        req.end();
    });
    pending.add(done);
    done.then(() => pending.delete(done));
    return { abort() {} };
}

const systemInfo = {
    brand: 'Apple', model: 'iPhone 13', pixelRatio: 3, screenWidth: 390, screenHeight: 844, windowWidth: 390,
    windowHeight: 844, language: 'zh_CN', version: '8.0.40', system: 'iOS 16.1', platform: 'ios', SDKVersion: '3.0.0',
};

global.wx = {
    request,
    getSystemInfo(options) { setImmediate(() => { options.success && options.success(systemInfo); options.complete && options.complete(systemInfo); }); },
    getSystemInfoSync() { return systemInfo; },
    getStorageSync(key) { return storage.has(key) ? storage.get(key) : ''; },
    setStorageSync(key, value) { storage.set(key, value); },
    getStorage(options) {
        setImmediate(() => {
            const result = storage.has(options.key) ? { data: storage.get(options.key) } : { errMsg: 'getStorage:fail data not found' };
            if (storage.has(options.key)) { options.success && options.success(result); } else { options.fail && options.fail(result); }
            options.complete && options.complete(result);
        });
    },
    setStorage(options) { storage.set(options.key, options.data); setImmediate(() => { options.success && options.success({}); options.complete && options.complete({}); }); },
    removeStorageSync(key) { storage.delete(key); },
    getNetworkType(options) { setImmediate(() => { const r = { networkType: 'wifi' }; options.success && options.success(r); options.complete && options.complete(r); }); },
    onNetworkStatusChange() {},
    onAppShow(callback) { appHooks.show.push(callback); },
    onAppHide(callback) { appHooks.hide.push(callback); },
    getLaunchOptionsSync() { return { path: 'pages/index/index', query: {}, scene: 1001, referrerInfo: {} }; },
    getEnterOptionsSync() { return { path: 'pages/index/index', query: {}, scene: 1001, referrerInfo: {} }; },
    getAccountInfoSync() { return { miniProgram: { appId: 'wx0123456789abcdef', envVersion: 'release', version: '1.0.0' } }; },
    login(options) { setImmediate(() => { options.success && options.success({ code: 'code' }); }); },
    setNavigationBarTitle() {},
};
global.App = function (options) { return options; };
global.Page = function (options) { return options; };
global.Component = function (options) { return options; };
global.Behavior = function (options) { return options; };
global.getCurrentPages = function () { return [{ route: 'pages/index/index', options: {} }]; };
global.getApp = function () { return {}; };
// The app's compiled configuration, which the SDK reads page titles from.
global.__wxConfig = { pages: ['pages/index/index'], global: { window: { navigationBarTitleText: 'Shop' } }, page: {} };
global.__wxAppCode__ = { 'pages/index/index.json': { navigationBarTitleText: 'Shop' } };

module.exports = {
    /** Runs the app's onHide hooks, as WeChat does when the user leaves the mini program. */
    hideApp() { for (const hook of appHooks.hide) hook({}); },
    /** Resolves once no request is in flight (after `quiet` ms without a new one). */
    async settle(quiet = 300) {
        for (;;) {
            await new Promise((resolve) => setTimeout(resolve, quiet));
            if (pending.size === 0) return;
            await Promise.all([...pending]);
        }
    },
};
